// Backend "torch" (the ATen kernels): passes the gate suite (gdr, layer, their backwards, mask
// cases and serving scenarios) on the CPU, and a CUDA device that is not there is an unsupported
// verdict with the reason, never a crash or a pass.
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <map>
#include <set>
#include <string>

#include "backends/torch/torch_backend.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/call_plan.h"
#include "harness/runner.h"

namespace deltacheck::backends {
namespace {

using cases::Case;

std::unique_ptr<Backend> torch_backend(const std::string& device) {
  register_torch_backends();
  BackendOptions o;
  o.device = device;
  return make_backend("torch", o);
}

TEST(TorchBackend, IsListedWithTorchOp) {
  register_torch_backends();
  register_torch_backends();  // a second call adds nothing
  int torch = 0, torch_op = 0;
  for (const BackendInfo& b : list_backends()) {
    torch += b.name == "torch";
    torch_op += b.name == "torch-op";
  }
  EXPECT_EQ(torch, 1);
  EXPECT_EQ(torch_op, 1);
}

// Every gate case of an op the backend has a kernel for (every cache mode of gdr, the backwards
// of the rule and of the layer through autograd, the mask ops) passes; other ops are unsupported,
// with the reason.
TEST(TorchBackend, PassesTheGateSuiteOnCpu) {
  auto backend = torch_backend("cpu");
  // serve: the serving scenarios, each call a gdr case (docs/scenarios.md).
  const std::set<std::string> ops{"gdr",  "gdr_grad", "layer",    "layer_grad",
                                  "mask", "layers",   "segments", "serve"};
  int passed = 0;
  std::map<std::string, int> passed_per_op;
  for (const Case& c : cases::suite("gate")) {
    const Support s = backend_supports(*backend, c);
    // The layer's pools (cache=pool, accept, ckpt: docs/serving.md) have no LibTorch kernel.
    const bool layer_pools =
        c.op() == "layer" &&
        std::set<std::string>{"pool", "accept", "ckpt", "spec"}.count(c.get("cache")) > 0;
    if (!ops.count(c.op()) || layer_pools) {
      EXPECT_FALSE(s.ok) << c.id();
      continue;
    }
    ASSERT_TRUE(s.ok) << c.id() << ": " << s.reason;
    // Layer and backward cases with the probes: the backend is not batch-invariant there, so they
    // judge within tolerance.
    const bool probes = c.op() == "layer" || c.op() == "gdr_grad" || c.op() == "layer_grad";
    const CaseResult r = run_case(prepare(c), *backend, probes);
    EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
    EXPECT_LT(r.margin, 1.0) << c.id();
    passed += r.verdict == Verdict::kPass;
    passed_per_op[c.op()] += r.verdict == Verdict::kPass;
  }
  EXPECT_GT(passed, 400);
  // The layer's backward through autograd of the ATen layer (dqkv through the conv included).
  EXPECT_EQ(passed_per_op["layer_grad"], 15);  // 13, and the 2 regime cases (seeds 800..)
}

TEST(TorchBackend, CudaWithoutADeviceIsUnsupported) {
  if (::torch::cuda::device_count() > 0) GTEST_SKIP() << "this machine has a CUDA device";
  auto backend = torch_backend("cuda");
  const Case c = Case::parse("gdr(layout=packed[20,0,30],seed=3)");
  EXPECT_FALSE(backend->supports(c).ok);
  const CaseResult r = run_case(prepare(c), *backend);
  EXPECT_EQ(r.verdict, Verdict::kUnsupported);
  EXPECT_EQ(r.message, "no CUDA device");
}

TEST(TorchBackend, UnknownDeviceIsUnsupportedWithTheName) {
  auto backend = torch_backend("tpu");
  const Support s = backend->supports(Case::parse("gdr(layout=single[16])"));
  EXPECT_FALSE(s.ok);
  EXPECT_NE(s.reason.find("unknown device 'tpu'"), std::string::npos) << s.reason;
}

}  // namespace
}  // namespace deltacheck::backends
