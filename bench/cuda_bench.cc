// GPU figures of the CUDA kernels (kernels/cuda), part of deltacheck_bench when the build has
// CUDA (DELTACHECK_BENCH_CUDA): the chunked gated-delta-rule prefill at B = 1, T = 8192 and over
// 1024 packed sequences of 8 tokens, HV = 8 and 32, K = V = 128, bf16 inputs, in-kernel L2 norm,
// final states out.
//
// How they are measured: random inputs (bench_util.h ranges, never zeros) in kInputSets sets of
// device buffers, outputs included, used in turn, so no launch finds its data in the L2 cache
// (each set is 64 MB or more and three others pass between two uses of one: an H100 has 50 MB of
// L2, an H200 reports 60 MB); kWarmup launches first; then batches of kRunsPerBatch launches
// queued back to back, each between its own pair of CUDA events, so the GPU never idles waiting
// for the host and every launch has its own device time. The figure's time is the median per batch;
// the counters give the median, minimum and 90th percentile over all launches and the nominal rate
// 4 T HV K V / median. Every CUDA call and kernel status is checked (an error ends the figure with
// the message), and the output of one set must be finite afterwards.
//
// The figures are registered at start-up only when a CUDA device is usable; otherwise one line on
// stderr says why they are skipped and the rest of the binary runs as usual.
#ifdef DELTACHECK_BENCH_CUDA

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/half.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gated_delta_rule.h"

namespace deltacheck::bench {
namespace {

namespace kc = kernels::cuda;

constexpr int kInputSets = 4;
constexpr int kWarmup = 5;
constexpr int kRunsPerBatch = 20;
constexpr int kBatches = 10;   // 200 timed launches per figure
constexpr int64_t kDim = 128;  // K = V

struct Shape {
  std::string name;
  int64_t seqs, seq_len, H, HV;  // seqs > 1: packed with cu_seqlens
  bool reference_points;         // the published 1 x 8192, HV = 8 figures apply
};

// Thrown by the helpers below, caught by the figure, which reports it with SkipWithError.
struct CudaFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw CudaFailure(kc::cuda_status(err, what).message());
}

void check(const Status& st, const char* what) {
  if (!st.ok()) throw CudaFailure(std::string(what) + ": " + st.message());
}

// Device memory freed on scope exit.
class Buffer {
 public:
  explicit Buffer(size_t bytes) {
    check(cudaMalloc(&ptr_, std::max<size_t>(bytes, 1)), "cudaMalloc");
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { (void)cudaFree(ptr_); }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  void* ptr_ = nullptr;
};

std::unique_ptr<Buffer> upload(const void* host, size_t bytes) {
  auto b = std::make_unique<Buffer>(bytes);
  check(cudaMemcpy(b->get(), host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  return b;
}

std::unique_ptr<Buffer> upload_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = float_to_bf16(x[i]);
  return upload(bits.data(), bits.size() * sizeof(uint16_t));
}

// One set of inputs and outputs of a figure.
struct Set {
  std::unique_ptr<Buffer> q, k, v, g, beta, o, final_state;
};

std::vector<Set> make_sets(const Shape& s) {
  const int64_t tokens = s.seqs * s.seq_len;
  std::vector<Set> sets(kInputSets);
  for (int i = 0; i < kInputSets; ++i) {
    const uint64_t seed = 100 + 10 * static_cast<uint64_t>(i);
    Set& set = sets[static_cast<size_t>(i)];
    set.q = upload_bf16(uniform(tokens * s.H * kDim, -1.0f, 1.0f, seed + 1));
    set.k = upload_bf16(uniform(tokens * s.H * kDim, -1.0f, 1.0f, seed + 2));
    set.v = upload_bf16(uniform(tokens * s.HV * kDim, -1.0f, 1.0f, seed + 3));
    const std::vector<float> g = uniform(tokens * s.HV, -0.5f, -0.01f, seed + 4);
    set.g = upload(g.data(), g.size() * sizeof(float));
    set.beta = upload_bf16(uniform(tokens * s.HV, 0.1f, 0.9f, seed + 5));
    set.o = std::make_unique<Buffer>(static_cast<size_t>(tokens * s.HV * kDim) * 2);
    set.final_state =
        std::make_unique<Buffer>(static_cast<size_t>(s.seqs * s.HV * kDim * kDim) * sizeof(float));
  }
  return sets;
}

kernels::GatedDeltaRuleParams params(const Shape& s, const Set& set, const int64_t* cu_seqlens) {
  kernels::GatedDeltaRuleParams p;
  p.batch = 1;
  p.seq_len = s.seqs * s.seq_len;
  p.num_heads = s.H;
  p.num_value_heads = s.HV;
  p.key_dim = kDim;
  p.value_dim = kDim;
  p.dtype = DType::kBF16;
  p.q = set.q->get();
  p.k = set.k->get();
  p.v = set.v->get();
  p.g = set.g->as<float>();
  p.beta = set.beta->get();
  p.o = set.o->get();
  if (s.seqs > 1) {
    p.cu_seqlens = cu_seqlens;
    p.num_seqs = s.seqs;
  }
  p.final_state = set.final_state->as<float>();  // fresh sequences: no initial state
  p.use_qk_l2norm = true;
  return p;
}

double percentile(std::vector<float> x, double q) {
  std::sort(x.begin(), x.end());
  const auto i = static_cast<size_t>(q * static_cast<double>(x.size() - 1) + 0.5);
  return x[std::min(i, x.size() - 1)];
}

// Events of one batch, destroyed on scope exit.
class Events {
 public:
  explicit Events(int n) : e_(static_cast<size_t>(n), nullptr) {
    for (cudaEvent_t& e : e_) check(cudaEventCreate(&e), "cudaEventCreate");
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  ~Events() {
    for (cudaEvent_t e : e_)
      if (e) (void)cudaEventDestroy(e);
  }
  cudaEvent_t operator[](size_t i) const { return e_[i]; }

 private:
  std::vector<cudaEvent_t> e_;
};

void run_figure(benchmark::State& st, const Shape& s) {
  const int64_t tokens = s.seqs * s.seq_len;
  std::vector<Set> sets = make_sets(s);
  std::vector<int64_t> cu(static_cast<size_t>(s.seqs + 1));
  for (int64_t i = 0; i <= s.seqs; ++i) cu[static_cast<size_t>(i)] = i * s.seq_len;
  const std::unique_ptr<Buffer> cu_dev = upload(cu.data(), cu.size() * sizeof(int64_t));
  std::vector<kernels::GatedDeltaRuleParams> p;
  for (const Set& set : sets) p.push_back(params(s, set, cu_dev->as<int64_t>()));
  check(kc::validate_sequence_layout(p[0], nullptr), "validate_sequence_layout");

  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  struct StreamGuard {
    cudaStream_t s;
    ~StreamGuard() { (void)cudaStreamDestroy(s); }
  } guard{stream};

  size_t launch = 0;
  for (int i = 0; i < kWarmup; ++i)
    check(kc::chunked_gated_delta_rule(p[launch++ % kInputSets], stream), "warm-up launch");
  check(cudaStreamSynchronize(stream), "warm-up");

  const Events start(kRunsPerBatch), stop(kRunsPerBatch);
  std::vector<float> all_ms;
  for (auto _ : st) {
    for (int r = 0; r < kRunsPerBatch; ++r) {
      check(cudaEventRecord(start[r], stream), "cudaEventRecord");
      check(kc::chunked_gated_delta_rule(p[launch++ % kInputSets], stream), "launch");
      check(cudaEventRecord(stop[r], stream), "cudaEventRecord");
    }
    check(cudaEventSynchronize(stop[kRunsPerBatch - 1]), "cudaEventSynchronize");
    std::vector<float> batch(kRunsPerBatch);
    for (int r = 0; r < kRunsPerBatch; ++r)
      check(cudaEventElapsedTime(&batch[static_cast<size_t>(r)], start[r], stop[r]),
            "cudaEventElapsedTime");
    all_ms.insert(all_ms.end(), batch.begin(), batch.end());
    st.SetIterationTime(percentile(batch, 0.5) * 1e-3);
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  check(cudaGetLastError(), "cudaGetLastError");

  // A kernel that bailed out early would be fast and wrong: the output must be finite.
  std::vector<uint16_t> o(static_cast<size_t>(tokens * s.HV * kDim));
  check(cudaMemcpy(o.data(), sets[0].o->get(), o.size() * 2, cudaMemcpyDeviceToHost),
        "cudaMemcpy of o");
  for (size_t i = 0; i < o.size(); ++i)
    if (!std::isfinite(bf16_to_float(o[i])))
      throw CudaFailure(fmt::format("o[{}] is not finite after the timed launches", i));

  const double median_s = percentile(all_ms, 0.5) * 1e-3;
  const double flops = gdr_nominal_flops(tokens, s.HV, kDim, kDim);
  st.counters["median_ms"] = median_s * 1e3;
  st.counters["min_ms"] = percentile(all_ms, 0.0);
  st.counters["p90_ms"] = percentile(all_ms, 0.9);
  st.counters["TFLOP/s"] = flops / median_s * 1e-12;
  st.counters["FLOP/s"] = flops / median_s;  // the summary's column, at the median
  st.counters["launches"] = static_cast<double>(all_ms.size());
  if (s.reference_points)
    st.SetLabel("published, H100: FLA Triton ~0.26 ms, FlashInfer Hopper ~0.11 ms");
}

void BM_cuda_gdr(benchmark::State& st, const Shape& s) {
  try {
    run_figure(st, s);
  } catch (const CudaFailure& e) {
    st.SkipWithError(e.what());
  }
}

// Registers the figures when there is a device; otherwise says why not.
bool register_cuda_figures() {
  const kc::DeviceInfo info = kc::current_device_info();
  if (!info.status.ok()) {
    std::fprintf(stderr, "deltacheck_bench: the CUDA figures (gdr_*/cuda/...) are skipped: %s\n",
                 info.status.message().c_str());
    return false;
  }
  benchmark::AddCustomContext(
      "cuda_device",
      fmt::format("{} (sm_{}{}, {} SMs, {:.0f} GiB)", info.name, info.compute_capability_major,
                  info.compute_capability_minor, info.sm_count,
                  static_cast<double>(info.global_memory) / (1 << 30)));
  benchmark::AddCustomContext(
      "cuda_reference_points",
      "chunked prefill 1 x 8192 tokens, HV 8, K = V = 128, bf16, on an H100 (published): "
      "flash-linear-attention Triton ~0.26 ms, FlashInfer Hopper kernel ~0.11 ms");
  // H = HV / 2 for HV = 32 (Qwen3-Next: 16 q/k heads, 32 value heads); H = HV for HV = 8.
  const Shape shapes[] = {
      {"gdr_prefill/cuda/B:1/T:8192/HV:8/K:128/V:128/bf16", 1, 8192, 8, 8, true},
      {"gdr_short/cuda/N:1024/L:8/HV:8/K:128/V:128/bf16", 1024, 8, 8, 8, false},
      {"gdr_prefill/cuda/B:1/T:8192/HV:32/K:128/V:128/bf16", 1, 8192, 16, 32, false},
      {"gdr_short/cuda/N:1024/L:8/HV:32/K:128/V:128/bf16", 1024, 8, 16, 32, false},
  };
  for (const Shape& s : shapes) {
    benchmark::RegisterBenchmark(s.name.c_str(), [s](benchmark::State& st) { BM_cuda_gdr(st, s); })
        ->UseManualTime()
        ->Iterations(kBatches)
        ->Unit(benchmark::kMillisecond);
  }
  return true;
}

[[maybe_unused]] const bool kCudaFiguresRegistered = register_cuda_figures();

}  // namespace
}  // namespace deltacheck::bench

#endif  // DELTACHECK_BENCH_CUDA
