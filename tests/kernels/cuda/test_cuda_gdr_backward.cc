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
  Grads d(p), again(p);
  DC_EXPECT_OK(run_on_device(p, d, params(p, d)));
  DC_EXPECT_OK(run_on_device(p, again, params(p, again)));
  within_bounds(GetParam().name + " cuda", d, p.oracle());
  EXPECT_EQ(bytes_of(d), bytes_of(again)) << "the gradients differ between two runs";
}

// The CPU kernels' problems, and the largest head dims the kernel takes over several blocks.
std::vector<Case> device_cases() {
  std::vector<Case> cases = kernel_cases();
  cases.push_back({"fp32_k128_v128", DType::kF32, {0, 300, 301, 700}, 710, 2, 4, 128, 128, -1});
  cases.push_back(
      {"bf16_k128_strong_decay", DType::kBF16, {0, 129, 129, 400}, 400, 1, 2, 128, 96, -20});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Device, CudaBackward, ::testing::ValuesIn(device_cases()),
                         [](const auto& info) { return info.param.name; });

// Padding entries (negative slots) and the tail: exact zeros; pool rows nobody addresses keep
// their bits.
TEST(CudaBackwardContract, DeadTokensZeroPoolRowsUntouched) {
  DC_REQUIRE_DEVICE();
  PoolProblem pool;
  Grads d = pool.grads();
  DeviceBuffer slots(pool.slots);
  DC_EXPECT_OK(run_on_device(pool.p, d, pool.params(d, slots.as<int32_t>(), 7)));
  pool.expect_contract(d, "cuda");
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
