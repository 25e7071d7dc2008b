// The input generator's bits, pinned: a hash of every input tensor of every case of the smoke
// suite (and of the same cases with a salted sequence, the isolation probe's perturbation), as the
// element-by-element generator produced them before the bulk generator (cases/rng.cc) replaced
// it. The bulk generator runs vectorized where the CPU has AVX2 and portable otherwise
// (core/simd.h); both paths must give these bits, so both are run. A change here changes every
// case's inputs: that needs a bump of cases/generator_version.h, not a new hash.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <string>

#include "cases/case.h"
#include "cases/generate.h"
#include "cases/suites.h"
#include "core/simd.h"
#include "tests/simd_paths.h"

namespace deltacheck::cases {
namespace {

uint64_t fnv1a(uint64_t h, const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

// Which cases a hash covers: those calibrated first, the gdr serving contracts' cases
// (cache=ckpt, accept), the serving scenarios (op serve), the rule's backward (op gdr_grad), its
// context-parallel cases (gdr_grad with cp), the layer's (op layer_grad), the tree-shaped drafts'
// (cache=tree) or gdr's input regimes (regime=..., ops/gdr/regimes.h). Each later part has seeds of
// its own and is pinned on its own, so the others' bits stay as they were.
enum class Part {
  kCalibrated,
  kServingModes,
  kScenarios,
  kGrad,
  kTree,
  kLayerGrad,
  kGradCp,
  kRegime,
  kLayerServing,
  kLayerTypes,
  kSsd
};
Part part_of(const Case& c) {
  if (c.op() == "ssd") return Part::kSsd;  // Mamba2 SSD (seeds 39000..)
  if (c.op() == "gdr" && c.has("regime")) return Part::kRegime;
  // The layer's serving state (ops/layer/serving.cc: pools, verify, one-token calls; seeds 5200..).
  if (c.op() == "layer" && c.seed() >= 5200 && c.seed() < 5300) return Part::kLayerServing;
  // The layers op's renamed layer types (Transformers PR #46738; seeds 2000..).
  if (c.op() == "layers" && c.seed() >= 2000) return Part::kLayerTypes;
  if (c.op() == "serve") return Part::kScenarios;
  if (c.op() == "gdr_grad") return c.has("cp") ? Part::kGradCp : Part::kGrad;
  if (c.op() == "layer_grad") return Part::kLayerGrad;
  if (c.op() == "gdr" && c.get("cache") == "tree") return Part::kTree;
  if (c.op() == "gdr" && (c.get("cache") == "ckpt" || c.get("cache") == "accept"))
    return Part::kServingModes;
  return Part::kCalibrated;
}

// Names, dtypes, shapes and bytes of every input of every case of a suite in `part`, in order.
uint64_t suite_inputs_hash(const std::string& suite_name, bool salted,
                           Part part = Part::kCalibrated) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const Case& c : suite(suite_name)) {
    if (part_of(c) != part) continue;
    GenOptions o;
    if (salted) o.sequence_salt[0] = 0x5eed;
    const TensorMap m = generate_inputs(c, o);
    h = fnv1a(h, c.id().data(), c.id().size());
    for (const Tensor& t : m.all()) {
      h = fnv1a(h, t.name().data(), t.name().size());
      const int dt = static_cast<int>(t.dtype());
      h = fnv1a(h, &dt, sizeof dt);
      h = fnv1a(h, t.shape().data(), t.shape().size() * sizeof(int64_t));
      h = fnv1a(h, t.data(), t.nbytes());
    }
  }
  return h;
}

std::string hex(uint64_t h) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

using GeneratorBits = test_support::OnSimdPath;

TEST_P(GeneratorBits, SmokeSuiteInputsAsCalibrated) {
  EXPECT_EQ(hex(suite_inputs_hash("smoke", false)), "ef7841fc32040916");
}

TEST_P(GeneratorBits, SmokeSuiteSaltedInputsAsCalibrated) {
  EXPECT_EQ(hex(suite_inputs_hash("smoke", true)), "4b4f9f61ec817054");
}

TEST_P(GeneratorBits, SmokeSuiteRegimeInputsAsPinned) {
  EXPECT_EQ(hex(suite_inputs_hash("smoke", false, Part::kRegime)), "166a4869c7896364");
  EXPECT_EQ(hex(suite_inputs_hash("smoke", true, Part::kRegime)), "664bd32417627b77");
}

TEST_P(GeneratorBits, SmokeSuiteServingInputsAsCalibrated) {
  EXPECT_EQ(hex(suite_inputs_hash("smoke", false, Part::kServingModes)), "cfa526c52adc740c");
  EXPECT_EQ(hex(suite_inputs_hash("smoke", true, Part::kServingModes)), "e19425d096d91f40");
}

// Re-pinned when the ids gained `contract=plain` and smoke a contract=serving scenario; the plain
// scenarios' plans (and so their token pools) are pinned unchanged in tests/ops/test_serve.cc.
TEST_P(GeneratorBits, SmokeServingScenarioInputsAsPinned) {
  EXPECT_EQ(hex(suite_inputs_hash("smoke", false, Part::kScenarios)), "beaa0ce483f07006");
}

// The backward's inputs (gdr's forward inputs, a padding tail, do and dht), pinned on their own.
TEST_P(GeneratorBits, SmokeSuiteGradInputsAsCalibrated) {
  EXPECT_EQ(hex(suite_inputs_hash("smoke", false, Part::kGrad)), "9d8b7a0510a98d12");
  EXPECT_EQ(hex(suite_inputs_hash("smoke", true, Part::kGrad)), "e4e178824c130db2");
}

// The context-parallel backward cases' inputs (those of the same case without cp).
TEST_P(GeneratorBits, SmokeSuiteContextParallelGradInputsAsPinned) {
  EXPECT_EQ(hex(suite_inputs_hash("smoke", false, Part::kGradCp)), "c173089e668f3c41");
  EXPECT_EQ(hex(suite_inputs_hash("smoke", true, Part::kGradCp)), "e4bad33de0cc6691");
}

// The tree-shaped drafts' inputs (their parents included), pinned on their own.
TEST_P(GeneratorBits, SmokeSuiteTreeInputsAsPinned) {
  EXPECT_EQ(hex(suite_inputs_hash("smoke", false, Part::kTree)), "a61fc1be37b30425");
  EXPECT_EQ(hex(suite_inputs_hash("smoke", true, Part::kTree)), "cc4afbb501715738");
}

// The layer backward's inputs (the layer's forward inputs, a padding tail, do, dht and dconv).
TEST_P(GeneratorBits, SmokeSuiteLayerGradInputsAsPinned) {
  EXPECT_EQ(hex(suite_inputs_hash("smoke", false, Part::kLayerGrad)), "78bcab9cc70b40aa");
  EXPECT_EQ(hex(suite_inputs_hash("smoke", true, Part::kLayerGrad)), "7ea715b644035d9c");
}

// The layer's serving cases (state pools, has_initial_state, accepted counts, one-token calls).
TEST_P(GeneratorBits, SmokeSuiteLayerServingInputsAsPinned) {
  EXPECT_EQ(hex(suite_inputs_hash("smoke", false, Part::kLayerServing)), "2e48c25deb4401a3");
  EXPECT_EQ(hex(suite_inputs_hash("smoke", true, Part::kLayerServing)), "887557b0feecedd6");
}

// The layers op's cases with the renamed layer types (seeds 2000..).
TEST_P(GeneratorBits, SmokeSuiteLayerTypeInputsAsPinned) {
  EXPECT_EQ(hex(suite_inputs_hash("smoke", false, Part::kLayerTypes)), "ddfb4cd99032ebaa");
  EXPECT_EQ(hex(suite_inputs_hash("smoke", true, Part::kLayerTypes)), "ddfb4cd99032ebaa");
}

// The Mamba2 SSD op's inputs (x, dt, B, C, z, A, dt_bias, D, states), pinned on their own.
TEST_P(GeneratorBits, SmokeSuiteSsdInputsAsPinned) {
  EXPECT_EQ(hex(suite_inputs_hash("smoke", false, Part::kSsd)), "174481af42364fc6");
  EXPECT_EQ(hex(suite_inputs_hash("smoke", true, Part::kSsd)), "986402e8334ad0c8");
}

INSTANTIATE_TEST_SUITE_P(Paths, GeneratorBits, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& p) {
                           return p.param ? "portable" : "native";
                         });

}  // namespace
}  // namespace deltacheck::cases
