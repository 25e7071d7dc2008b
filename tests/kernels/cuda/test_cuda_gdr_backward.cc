// The CUDA backward of the gated delta rule (kernels/cuda/gated_delta_rule_backward.h) on the
// device against the FP64 backward, with the CPU kernels' problems and bounds
// (tests/kernels/gdr_backward_testbed.h), the same bits on a second run, exact zeros past
// cu_seqlens[-1] and for padding entries, and what it refuses. Its arithmetic is also run without
// a device by tests/kernels/cuda_host/ (the host emulation).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/gated_delta_rule_backward.h"
#include "tests/kernels/cuda/cuda_kernels_testbed.h"
#include "tests/kernels/gdr_backward_testbed.h"

namespace deltacheck::kernels::cuda {
namespace {

using namespace testbed;           // NOLINT(build/namespaces): the tests' own testbed
using namespace backward_testbed;  // NOLINT(build/namespaces)

// Device copies of a host tensor's bytes, brought back into it by download().
class Mirror {
 public:
  explicit Mirror(Tensor& t)
      : host_(t), bytes_(static_cast<size_t>(t.size()) * dtype_size(t.type)) {
    buffer_ = std::make_unique<DeviceBuffer>(bytes_);
    check_cuda(cudaMemcpy(buffer_->as<void>(), t.data(), bytes_, cudaMemcpyHostToDevice),
               "cudaMemcpy H2D");
  }
  void* get() const { return buffer_->as<void>(); }
  void download() {
    check_cuda(cudaDeviceSynchronize(), "kernel execution");
    check_cuda(cudaMemcpy(host_.data(), buffer_->as<void>(), bytes_, cudaMemcpyDeviceToHost),
               "cudaMemcpy D2H");
  }

 private:
  Tensor& host_;
  size_t bytes_;
  std::unique_ptr<DeviceBuffer> buffer_;
};

// Runs the CUDA backward on device copies of b's buffers (host pointers into p and d) and brings
// the gradients back into d.
Status run_on_device(Problem& p, Grads& d, const GatedDeltaRuleBackwardParams& host) {
  Mirror q(p.q), k(p.k), v(p.v), g(p.g), beta(p.beta), dout(p.dout), h0(p.h0), dht(p.dht);
  Mirror dq(d.dq), dk(d.dk), dv(d.dv), dg(d.dg), dbeta(d.dbeta), dh0(d.dh0);
  std::unique_ptr<DeviceBuffer> cu;
  GatedDeltaRuleBackwardParams b = host;
  GatedDeltaRuleParams& f = b.forward;
  f.q = q.get(), f.k = k.get(), f.v = v.get(), f.g = static_cast<const float*>(g.get());
  f.beta = beta.get();
  if (f.cu_seqlens) {
    cu = std::make_unique<DeviceBuffer>(p.cu);
    f.cu_seqlens = cu->as<int64_t>();
  }
  if (f.initial_state) f.initial_state = static_cast<const float*>(h0.get());
  b.d_output = dout.get();
  if (b.d_final_state) b.d_final_state = static_cast<const float*>(dht.get());
  b.dq = dq.get(), b.dk = dk.get(), b.dv = dv.get(), b.dg = static_cast<float*>(dg.get());
  b.dbeta = dbeta.get(), b.dh0 = static_cast<float*>(dh0.get());
  const Status st = recurrent_gated_delta_rule_backward(b, nullptr);
  if (!st.ok()) return st;
  for (Mirror* m : {&dq, &dk, &dv, &dg, &dbeta, &dh0}) m->download();
  return Status::Ok();
}

class CudaBackward : public ::testing::TestWithParam<Case> {};

TEST_P(CudaBackward, MatchesTheFp64BackwardWithTheSameBitsTwice) {
  DC_REQUIRE_DEVICE();
  Problem p(GetParam());
  const auto ref = p.oracle();
  Grads d(p), again(p);
  DC_EXPECT_OK(run_on_device(p, d, params(p, d)));
  DC_EXPECT_OK(run_on_device(p, again, params(p, again)));
  const struct {
    const char* name;
    const Tensor& got;
    const Tensor& second;
    const std::vector<double>& want;
  } rows[] = {{"dq", d.dq, again.dq, ref.dq},
              {"dk", d.dk, again.dk, ref.dk},
              {"dv", d.dv, again.dv, ref.dv},
              {"dg", d.dg, again.dg, ref.dg},
              {"dbeta", d.dbeta, again.dbeta, ref.dbeta},
              {"dh0", d.dh0, again.dh0, ref.dh0}};
  std::printf("[ measured ] %s cuda:", GetParam().name.c_str());
  for (const auto& r : rows) {
    const double e = rel_rms(r.got, r.want);
    std::printf(" %s %.1e", r.name, e);
    EXPECT_LT(e, bound(r.got.type)) << r.name;  // NaN (unwritten) too
    EXPECT_EQ(0, std::memcmp(r.got.cdata(), r.second.cdata(),
                             static_cast<size_t>(r.got.size()) * dtype_size(r.got.type)))
        << r.name << " differs between two runs";
  }
  std::printf("\n");
}

const Case kCases[] = {
    {"fp32_packed_gva_two_value_blocks",
     DType::kF32,
     {0, 0, 37, 37, 150, 160},
     170,
     2,
     4,
     32,
     40,
     -3},
    {"fp32_chunk_edges_strong_decay",
     DType::kF32,
     {0, 63, 127, 192, 193, 193},
     200,
     1,
     2,
     13,
     7,
     -20},
    {"bf16_packed_gva", DType::kBF16, {0, 0, 37, 37, 150, 160}, 170, 2, 4, 32, 24, -3},
    {"fp16_chunk_edges_strong_decay",
     DType::kF16,
     {0, 63, 127, 192, 193, 193},
     200,
     2,
     2,
     16,
     16,
     -20},
    {"fp32_batch_rows_bare", DType::kF32, {}, 90, 1, 4, 16, 16, -1, 3, false, false, false},
    {"fp32_k128_v128", DType::kF32, {0, 300, 301, 700}, 710, 2, 4, 128, 128, -1},
    {"bf16_k128_strong_decay", DType::kBF16, {0, 129, 129, 400}, 400, 1, 2, 128, 96, -20},
};

INSTANTIATE_TEST_SUITE_P(Device, CudaBackward, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return info.param.name; });

// Padding entries (negative slots) and the tail: exact zeros; pool rows nobody addresses keep
// their bits.
TEST(CudaBackwardContract, DeadTokensZeroPoolRowsUntouched) {
  DC_REQUIRE_DEVICE();
  Problem p({"", DType::kF32, {0, 20, 50, 60}, 70, 1, 2, 8, 5, -2});
  const int64_t row = p.HV * p.K * p.V;
  Grads d(p);
  // Sequence i uses pool row {2, -1, 0}[i]; rows 1 and 3 belong to nobody.
  p.h0 = Tensor(DType::kF32, 4 * row), p.dht = Tensor(DType::kF32, 4 * row);
  d.dh0 = Tensor(DType::kF32, 4 * row);
  for (int64_t i = 0; i < 4 * row; ++i) {
    p.h0.f32[i] = static_cast<float>(std::sin(0.3 * i));
    p.dht.f32[i] = static_cast<float>(std::cos(0.7 * i));
    d.dh0.f32[i] = -7.0f;
  }
  const std::vector<int32_t> host_slots{2, -1, 0};
  DeviceBuffer slots(host_slots);
  GatedDeltaRuleBackwardParams b = params(p, d);
  b.forward.state_slots = slots.as<int32_t>(), b.forward.num_state_rows = 4;
  b.forward.chunk_size = 7;
  DC_EXPECT_OK(run_on_device(p, d, b));
  for (int64_t e = 0; e < row; ++e) {
    ASSERT_EQ(d.dh0.f32[1 * row + e], -7.0f);
    ASSERT_EQ(d.dh0.f32[3 * row + e], -7.0f);
  }
  for (int64_t t = 20; t < 70; ++t) {
    if (t >= 50 && t < 60) continue;
    for (int64_t e = 0; e < p.H * p.K; ++e) {
      ASSERT_EQ(d.dq.f32[t * p.H * p.K + e], 0.0f) << t;
      ASSERT_EQ(d.dk.f32[t * p.H * p.K + e], 0.0f) << t;
    }
    for (int64_t e = 0; e < p.HV * p.V; ++e) ASSERT_EQ(d.dv.f32[t * p.HV * p.V + e], 0.0f);
    for (int64_t e = 0; e < p.HV; ++e) {
      ASSERT_EQ(d.dg.f32[t * p.HV + e], 0.0f);
      ASSERT_EQ(d.dbeta.f32[t * p.HV + e], 0.0f);
    }
  }
}

// What the backward refuses, from the host-side fields alone (no device needed).
TEST(CudaBackwardContract, CanImplement) {
  Problem p({"", DType::kF32, {0, 10, 20}, 20, 1, 1, 4, 4, -1});
  Grads d(p);
  GatedDeltaRuleBackwardParams b = params(p, d);
  EXPECT_TRUE(gated_delta_rule_backward_can_implement(b).ok());
  b.dg = nullptr;
  EXPECT_EQ(gated_delta_rule_backward_can_implement(b).code(), StatusCode::kInvalidArgument);
  b = params(p, d);
  b.forward.key_dim = 256;
  const Status k256 = gated_delta_rule_backward_can_implement(b);
  EXPECT_EQ(k256.code(), StatusCode::kUnsupported);
  EXPECT_NE(k256.message().find("key_dim 256 > 128"), std::string::npos) << k256.message();
  b = params(p, d);
  b.forward.chunk_size = 65;
  EXPECT_EQ(gated_delta_rule_backward_can_implement(b).code(), StatusCode::kUnsupported);
  // The workspace: checkpoints, one CTA's replayed block, partials, live flags.
  b = params(p, d);
  EXPECT_GT(gated_delta_rule_backward_workspace_bytes(b, 2),
            gated_delta_rule_backward_workspace_bytes(b, 1));
}

// A cu_seqlens ending past T is refused before any kernel runs.
TEST(CudaBackwardContract, RejectsCuSeqlensPastT) {
  DC_REQUIRE_DEVICE();
  Problem p({"", DType::kF32, {0, 10, 21}, 20, 1, 1, 4, 4, -1});
  Grads d(p);
  const Status st = run_on_device(p, d, params(p, d));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("past T"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace deltacheck::kernels::cuda
