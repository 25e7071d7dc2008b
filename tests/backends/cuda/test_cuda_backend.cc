// Backend "cuda" (the kernels of kernels/cuda). Without a device every case is unsupported with
// the reason, and the tool exits 0 with nothing but unsupported rows; which cases the kernels
// cover is decided from the case alone and checked here too. With a device (scripts/gpu-check.sh)
// the smoke suite passes with the leakage probes and deliberately broken inputs are errors.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <regex>
#include <set>
#include <string>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device_tensors.h"
#include "cases/suites.h"
#include "deltacheck_test_paths.h"
#include "harness/backend.h"
#include "harness/runner.h"
#include "kernels/cuda/device.h"
#include "ops/gdr_grad/params.h"

namespace deltacheck::backends {
namespace {

using cases::Case;

bool have_device() { return kernels::cuda::cuda_device_available().ok(); }

std::unique_ptr<Backend> cuda_backend() {
  register_cuda_backends();
  return make_backend("cuda");
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

TEST(CudaBackend, IsListedOnce) {
  register_cuda_backends();
  register_cuda_backends();  // a second call adds nothing
  int n = 0;
  for (const BackendInfo& b : list_backends()) n += b.name == "cuda";
  EXPECT_EQ(n, 1);
}

// What the kernels cover, from the case alone: every gdr cache mode at K <= 128 but the serving
// ones (ckpt, accept, tree), boolean masks,
// segments from position_ids; everything else with a reason naming what is missing.
TEST(CudaBackend, KernelCoverageFromTheCase) {
  for (const char* cache : {"none", "prefill", "decode", "chunked", "dynamic", "pool", "spec"}) {
    const std::string layout = std::string(cache) == "decode" ? "packed[1*4]" : "batch[2x8]";
    const std::string state = std::string(cache) == "none" ? "none" : "rand";
    const Case c = Case::parse("gdr(layout=" + layout + ",cache=" + cache + ",state=" + state +
                               ",K=128,V=100,dtype=bf16)");
    const Support s = cuda_kernels_support(c);
    EXPECT_TRUE(s.ok) << c.id() << ": " << s.reason;
  }
  // The serving contracts: accept and tree on the recurrent kernel with their row tables, ckpt on
  // the chunked kernel block by block.
  for (const char* id :
       {"gdr(layout=single[100],cache=ckpt,calls=48)", "gdr(layout=batch[4x3],cache=accept)",
        "gdr(layout=batch[4x3],cache=tree)"})
    EXPECT_TRUE(cuda_kernels_support(Case::parse(id)).ok) << id;
  const Support k256 = cuda_kernels_support(Case::parse("gdr(layout=single[16],K=256)"));
  EXPECT_FALSE(k256.ok);
  EXPECT_TRUE(starts_with(k256.reason, "kernels/cuda: key_dim 256 > 128")) << k256.reason;

  EXPECT_TRUE(cuda_kernels_support(Case::parse("mask(format=bool,padding=left)")).ok);
  const Support additive = cuda_kernels_support(Case::parse("mask(format=additive-inf)"));
  EXPECT_FALSE(additive.ok);
  EXPECT_NE(additive.reason.find("boolean masks only"), std::string::npos) << additive.reason;
  EXPECT_TRUE(cuda_kernels_support(Case::parse("segments(source=position)")).ok);
  for (const char* id : {"segments(source=cu)", "segments(source=padding)",
                         "layers(pattern=qwen35)", "layer(layout=single[16])"}) {
    const Support s = cuda_kernels_support(Case::parse(id));
    EXPECT_FALSE(s.ok) << id;
    EXPECT_TRUE(starts_with(s.reason, "kernels/cuda")) << id << ": " << s.reason;
  }

  // The backward: gdr_grad (cp cases included) up to K = 128, not the layer's.
  EXPECT_TRUE(cuda_kernels_support(
                  Case::parse("gdr_grad(layout=packed[0,37,70],K=128,V=100,dtype=fp16,dht=rand,"
                              "cp=50)"))
                  .ok);
  const Support grad256 = cuda_kernels_support(Case::parse("gdr_grad(layout=single[16],K=256)"));
  EXPECT_FALSE(grad256.ok);
  EXPECT_TRUE(starts_with(grad256.reason, "kernels/cuda: key_dim 256 > 128")) << grad256.reason;

  // The gate suite: every gdr and gdr_grad case at K <= 128 and part of the mask cases are
  // covered; the head dim 256 cases (docs/cases.md, regimes beyond gdr) are declined with the
  // reason above.
  std::set<std::string> covered_ops;
  int covered = 0, gdr_kernel_cases = 0, grad_cases = 0;
  for (const Case& c : cases::suite("gate")) {
    const Support s = cuda_kernels_support(c);
    if (c.op() == "layer_grad") {  // no CUDA gates or norm backward
      EXPECT_FALSE(s.ok) << c.id();
      continue;
    }
    if ((c.op() == "gdr" || c.op() == "gdr_grad") && std::stoll(c.get("K")) > 128) {
      EXPECT_FALSE(s.ok) << c.id();
      EXPECT_TRUE(starts_with(s.reason, "kernels/cuda: key_dim")) << c.id() << ": " << s.reason;
      continue;
    }
    if (c.op() == "gdr" || c.op() == "gdr_grad") {
      EXPECT_TRUE(s.ok) << c.id() << ": " << s.reason;
      ++(c.op() == "gdr" ? gdr_kernel_cases : grad_cases);
    }
    if (!s.ok) {
      EXPECT_FALSE(s.reason.empty()) << c.id();
      continue;
    }
    covered_ops.insert(c.op());
    ++covered;
  }
  EXPECT_EQ(covered_ops, (std::set<std::string>{"gdr", "gdr_grad", "mask", "segments"}));
  // Those gdr and gdr_grad cases and some mask cases (the rest of the ops have no CUDA kernel).
  EXPECT_GT(gdr_kernel_cases, 100);
  EXPECT_GT(grad_cases, 50);
  EXPECT_GT(covered, gdr_kernel_cases + grad_cases);
  int full = 0, full_covered = 0;
  for (const Case& c : cases::suite("full")) ++full, full_covered += cuda_kernels_support(c).ok;
  std::printf(
      "[ measured ] the kernels cover %d of the gate's %zu cases (%d gdr_grad), %d of the "
      "full suite's %d\n",
      covered, cases::suite("gate").size(), grad_cases, full_covered, full);
}

TEST(CudaBackend, WithoutADeviceEveryCaseIsUnsupported) {
  if (have_device()) GTEST_SKIP() << "this machine has a CUDA device";
  auto backend = cuda_backend();
  int n = 0;
  for (const Case& c : cases::suite("full")) {
    const Support s = backend->supports(c);
    EXPECT_FALSE(s.ok) << c.id();
    EXPECT_TRUE(starts_with(s.reason, "no CUDA device")) << c.id() << ": " << s.reason;
    ++n;
  }
  EXPECT_GT(n, 700);
  // The verdict, and a run() reached anyway: unsupported with the reason, never a crash.
  const Case c = Case::parse("gdr(layout=packed[20,0,30],seed=3)");
  const PreparedCase pc = prepare(c);
  const CaseResult r = run_case(pc, *backend);
  EXPECT_EQ(r.verdict, Verdict::kUnsupported);
  EXPECT_TRUE(starts_with(r.message, "no CUDA device")) << r.message;
  cases::TensorMap out = allocate_outputs(pc.outputs);
  const Status st = backend->run(c, pc.inputs, out);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_TRUE(starts_with(st.message(), "no CUDA device")) << st.message();
}

TEST(CudaBackend, WithoutADeviceAllocationIsAnErrorValue) {
  if (have_device()) GTEST_SKIP() << "this machine has a CUDA device";
  cuda_backend::DeviceBuffer b;
  const Status st = b.allocate(64, "x");
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(starts_with(st.message(), "cudaMalloc of 'x' (64 bytes): ")) << st.message();
  EXPECT_EQ(b.get(), nullptr);
}

// Runs a shell command; stdout and stderr together. An outer sharded run's variables are not
// passed on.
int run_command(const std::string& command, std::string* output) {
  const std::string cmd = "env -u GTEST_TOTAL_SHARDS -u GTEST_SHARD_INDEX " + command + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) output->append(buf, n);
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs build/deltacheck.
int run_tool(const std::string& args, std::string* output) {
  return run_command(std::string(DELTACHECK_BINARY_DIR) + "/deltacheck " + args, output);
}

// Unsupported is not a failure: the gate passes, and the totals show every case unsupported.
TEST(CudaBackend, ToolExitsZeroWithOnlyUnsupportedRows) {
  if (have_device()) GTEST_SKIP() << "this machine has a CUDA device";
  std::string out;
  const int code = run_tool("run --suite full --backend cuda --progress lines", &out);
  EXPECT_EQ(code, 0) << out;
  const size_t full = cases::suite("full").size();
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(\ncuda\s+0\s+0\s+0\s+0\s+(\d+)\s+0\s*\n)")))
      << out;
  EXPECT_EQ(std::stoul(m[1]), full);
  // One row per case, each unsupported with the reason.
  size_t rows = 0;
  for (size_t at = out.find("UNSUPPORTED"); at != std::string::npos;
       at = out.find("UNSUPPORTED", at + 1))
    ++rows;
  EXPECT_EQ(rows, full);
  EXPECT_NE(out.find("no CUDA device"), std::string::npos);
  EXPECT_EQ(out.find("PASS "), std::string::npos);
}

// The GPU check's steps, without a GPU: the dry run names every step and its command, and a bad
// argument is a usage error.
TEST(GpuCheckScript, DryRunListsEveryStep) {
  const std::string script = std::string(DELTACHECK_SOURCE_DIR) + "/scripts/gpu-check.sh";
  std::string out;
  ASSERT_EQ(run_command("bash -n " + script, &out), 0) << out;
  out.clear();
  ASSERT_EQ(run_command(script + " --dry-run --report-dir /nonexistent/r", &out), 0) << out;
  for (const char* step : {"[configure]",
                           "-DCMAKE_CUDA_ARCHITECTURES=90",
                           "[build]",
                           "[device]",
                           "[test_kernels_cuda]",
                           "[test_backends_cuda]",
                           "[gate]",
                           "--suite gate --backend cuda",
                           "[gate gdr_grad]",
                           "--filter \\^gdr_grad",
                           "[full]",
                           "--report-dir /nonexistent/r/full",
                           "[memcheck smoke]",
                           "--tool memcheck",
                           "[racecheck smoke]",
                           "--tool racecheck",
                           "[memcheck test_kernels_cuda]",
                           "[racecheck test_kernels_cuda]",
                           "[bench]",
                           "--benchmark_filter=/cuda/"})
    EXPECT_NE(out.find(step), std::string::npos) << step << " missing from:\n" << out;
  // FLA's Triton kernels through the peer adapter, on the GPU (no interpreter there).
  for (const char* step : {"[fla triton]", "--peer fla-chunk --peer fla-fused-recurrent --long"})
    EXPECT_NE(out.find(step), std::string::npos) << step << " missing from:\n" << out;
  out.clear();
  EXPECT_EQ(run_command(script + " --no-such-flag", &out), 2) << out;
  EXPECT_NE(out.find("deltacheck: error: unknown argument '--no-such-flag'"), std::string::npos);
  out.clear();
  const std::string bundle = std::string(DELTACHECK_SOURCE_DIR) + "/scripts/gpu-bundle.sh";
  ASSERT_EQ(run_command(bundle + " --dry-run", &out), 0) << out;
  for (const char* pkg : {"apt-get download", "libfmt-dev", "nlohmann-json3-dev", "libcli11-dev",
                          "libgtest-dev", "libbenchmark-dev", "libhdf5-dev", "dpkg -x"})
    EXPECT_NE(out.find(pkg), std::string::npos) << pkg << " missing from:\n" << out;
}

// ---- with a device ----------------------------------------------------------------------------

#define DC_REQUIRE_DEVICE()                                                  \
  do {                                                                       \
    const Status device_ = kernels::cuda::cuda_device_available();           \
    if (!device_.ok()) GTEST_SKIP() << "unsupported: " << device_.message(); \
  } while (0)

// Every smoke case the kernels cover passes, the oracle-free leakage probes included.
TEST(CudaBackendOnDevice, PassesTheSmokeSuiteWithProbes) {
  DC_REQUIRE_DEVICE();
  auto backend = cuda_backend();
  int passed = 0;
  for (const Case& c : cases::suite("smoke")) {
    const Support s = backend->supports(c);
    if (!cuda_kernels_support(c).ok) {
      EXPECT_FALSE(s.ok) << c.id();
      continue;
    }
    ASSERT_TRUE(s.ok) << c.id() << ": " << s.reason;
    const CaseResult r = run_case(prepare(c), *backend, /*probes=*/true);
    EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
    passed += r.verdict == Verdict::kPass;
  }
  EXPECT_GT(passed, 20);
}

// The serving contracts of the gate (block checkpoints, speculative verify resuming from the
// accepted row, tree-shaped drafts) pass against the FP64 oracle, probes included.
TEST(CudaBackendOnDevice, PassesTheGatesServingContractCases) {
  DC_REQUIRE_DEVICE();
  auto backend = cuda_backend();
  int passed = 0;
  for (const Case& c : cases::suite("gate")) {
    const std::string cache = c.op() == "gdr" ? c.get("cache") : "";
    if (cache != "ckpt" && cache != "accept" && cache != "tree") continue;
    const CaseResult r = run_case(prepare(c), *backend, /*probes=*/true);
    EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
    passed += r.verdict == Verdict::kPass;
  }
  EXPECT_GE(passed, 15);
}

// The gate's gdr_grad cases (cp=S included, through its two ranks' calls) pass against the FP64
// backward with the probes, and the backward repeats its bits: a second run of each one-call case
// gives every output byte for byte.
TEST(CudaBackendOnDevice, PassesTheGatesGdrGradCasesWithTheSameBitsTwice) {
  DC_REQUIRE_DEVICE();
  auto backend = cuda_backend();
  int passed = 0, repeated = 0;
  for (const Case& c : cases::suite("gate")) {
    if (c.op() != "gdr_grad") continue;
    const PreparedCase pc = prepare(c);
    const CaseResult r = run_case(pc, *backend, /*probes=*/true);
    EXPECT_EQ(r.verdict, Verdict::kPass) << c.id() << ": " << r.message;
    passed += r.verdict == Verdict::kPass;
    if (!ops::gdr_grad::decode(c).cp.empty()) continue;  // run() is each rank's call
    cases::TensorMap first = allocate_outputs(pc.outputs), second = allocate_outputs(pc.outputs);
    ASSERT_TRUE(backend->run(c, pc.inputs, first).ok()) << c.id();
    ASSERT_TRUE(backend->run(c, pc.inputs, second).ok()) << c.id();
    for (const cases::Tensor& t : first.all())
      EXPECT_EQ(0, std::memcmp(t.data(), second.at(t.name()).data(), t.nbytes()))
          << c.id() << ": " << t.name() << " differs between two runs";
    ++repeated;
  }
  EXPECT_GT(passed, 50);
  EXPECT_GT(repeated, 40);
}

// The comparison of the device's gradients can fail: one element of dk of the first sequence
// moved by 1 after the run gives a fail (in a later sequence the judge would presume a leak).
TEST(CudaBackendOnDevice, AMovedGradientFails) {
  DC_REQUIRE_DEVICE();
  auto backend = cuda_backend();
  const Case c = Case::parse("gdr_grad(layout=packed[20,0,30],dht=rand,tail=3,seed=2)");
  const PreparedCase pc = prepare(c);
  cases::TensorMap out = allocate_outputs(pc.outputs);
  ASSERT_TRUE(backend->run(c, pc.inputs, out).ok());
  EXPECT_EQ(judge(pc, out, "cuda").verdict, Verdict::kPass);
  cases::Tensor& dk = out.at("dk");
  const int64_t at = (5 * 2 + 1) * 64 + 3;  // token 5, key head 1, element 3
  dk.set(at, dk.get(at) + 1.0);
  EXPECT_EQ(judge(pc, out, "cuda").verdict, Verdict::kFail);
}

// Padding entries of a pool are never written: their rows of o keep the runner's poison through
// the device round trip (the outputs are mirrored, not freshly allocated).
TEST(CudaBackendOnDevice, UnwrittenOutputsStayPoisoned) {
  DC_REQUIRE_DEVICE();
  auto backend = cuda_backend();
  const Case c = Case::parse("gdr(layout=packed[5,7,9,3],cache=pool,calls=2,seed=4)");
  const PreparedCase pc = prepare(c);
  cases::TensorMap out = allocate_outputs(pc.outputs);
  ASSERT_TRUE(backend->run(c, pc.inputs, out).ok());
  const cases::Tensor& o = out.at("o");
  EXPECT_GT(o.count_poisoned(), 0);  // the padding entries' rows
  EXPECT_LT(o.count_poisoned(), o.numel());
  EXPECT_EQ(judge(pc, out, "cuda").verdict, Verdict::kPass);
}

// Inputs the kernels must refuse: a decreasing cu_seqlens and a slot past the pool are errors
// (verdict error), not a pass and not a crash.
TEST(CudaBackendOnDevice, MalformedLayoutsAreErrors) {
  DC_REQUIRE_DEVICE();
  auto backend = cuda_backend();
  {
    const Case c = Case::parse("gdr(layout=packed[10,20,30],seed=5)");
    PreparedCase pc = prepare(c);
    int64_t* cu = pc.inputs.at("cu_seqlens").as<int64_t>();
    std::swap(cu[1], cu[2]);
    cases::TensorMap out = allocate_outputs(pc.outputs);
    const Status st = backend->run(c, pc.inputs, out);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
    EXPECT_EQ(run_case(pc, *backend).verdict, Verdict::kError);
  }
  {
    const Case c = Case::parse("gdr(layout=packed[10,20,30],cache=pool,seed=6)");
    PreparedCase pc = prepare(c);
    pc.inputs.at("state_slots").as<int32_t>()[0] = 1 << 20;
    cases::TensorMap out = allocate_outputs(pc.outputs);
    const Status st = backend->run(c, pc.inputs, out);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
    EXPECT_NE(st.message().find("state slot"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace deltacheck::backends
