// The layer types Transformers PR #46738 named per backbone (linear_attention_mamba,
// linear_attention_mamba2, linear_attention_gated_delta_net) beside the old linear_attention:
// the layers op spells them (pattern names mamba, mamba2, gdn and qwen35-gdn), the reference and
// the CPU builder give them linear_attention's rule, the suites hold cases with them, a builder
// that knows only the old name gets error naming the new one, and an unknown type is still a
// one-line error.
#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/mask_builders.h"
#include "cases/suites.h"
#include "harness/backend.h"
#include "harness/runner.h"
#include "ops/mask/params.h"
#include "reference/mask.h"

namespace deltacheck::backends {
namespace {

using cases::Case;

const std::string kGdn = "linear_attention_gated_delta_net";

TEST(LayerTypeNames, PatternsSpellTheRenamedTypes) {
  EXPECT_EQ(ops::mask::mask_layer_types("mamba+mamba2+gdn+linear+full").value(),
            (std::vector<std::string>{"linear_attention_mamba", "linear_attention_mamba2", kGdn,
                                      "linear_attention", "full_attention"}));
  const std::vector<std::string> qwen = ops::mask::mask_layer_types("qwen35-gdn").value();
  EXPECT_EQ(qwen, (std::vector<std::string>{kGdn, kGdn, kGdn, "full_attention", kGdn, kGdn, kGdn,
                                            "full_attention"}));
  // The old names keep their meaning.
  EXPECT_EQ(ops::mask::mask_layer_types("qwen35").value()[0], "linear_attention");
}

TEST(LayerTypeNames, UnknownNamesAreOneLineErrors) {
  for (const char* bad : {"gdn+mamba3", "linear_attention_gdn", "full+GDN"}) {
    const auto types = ops::mask::mask_layer_types(bad);
    ASSERT_FALSE(types.ok()) << bad;
    const std::string msg = types.status().message();
    EXPECT_NE(msg.find("unknown layer"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mamba, mamba2, gdn"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  reference::MaskSpec spec;
  spec.batch = 1;
  spec.q_len = 4;
  spec.kv_length = 4;
  try {
    reference::layer_masks({kGdn, "linear_attention_gdn"}, spec);
    ADD_FAILURE() << "an unknown layer type was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown layer type 'linear_attention_gdn' at layer 1");
  }
}

TEST(LayerTypeNames, RenamedTypesGetTheLinearAttentionRule) {
  // Left padding in row 0: linear_attention gets a validity mask; every renamed type the same.
  const Case c =
      Case::parse("layers(pattern=linear+mamba+mamba2+gdn+full,B=2,q=24,padding=left,seed=2001)");
  const PreparedCase pc = prepare(c);
  const auto& want = pc.expected.at("linear_attention");
  ASSERT_GT(std::count(want.begin(), want.end(), 0.0), 0) << "row 0 should hold padding";
  for (const char* t :
       {"linear_attention_mamba", "linear_attention_mamba2", "linear_attention_gated_delta_net"}) {
    EXPECT_EQ(pc.expected.at(t), want) << t;
  }
  const reference::LayerMasks lm =
      reference::layer_masks(ops::mask::mask_layer_types(c.get("pattern")).value(), [&] {
        reference::MaskSpec s;
        s.batch = 1;
        s.q_len = 1;
        s.kv_length = 9;
        s.q_offset = {8};
        return s;
      }());
  ASSERT_EQ(lm.masks.size(), 5u);
  for (size_t i = 0; i < 4; ++i)  // decoding one token: no mask, as linear_attention
    EXPECT_EQ(lm.masks[i].kind, reference::LayerMaskKind::kNone) << lm.masks[i].layer_type;
  EXPECT_EQ(lm.masks[4].kind, reference::LayerMaskKind::kAttention);
}

TEST(LayerTypeNames, SuitesHoldThemAndOnlyAnOldNamesBuilderFails) {
  auto cpu = make_backend("cpu");
  auto old = make_backend("wrong:mask-old-layer-names");
  int renamed = 0;
  for (const char* s : {"smoke", "gate"})
    for (const Case& c : cases::suite(s)) {
      if (c.op() != "layers") continue;
      bool has_renamed = false;
      const std::vector<std::string> types = ops::mask::mask_layer_types(c.get("pattern")).take();
      for (const std::string& t : types)
        has_renamed = has_renamed || t.rfind("linear_attention_", 0) == 0;
      if (!has_renamed && c.seed() % 17 != 0) continue;  // a sample of the others
      const PreparedCase pc = prepare(c);
      const CaseResult r_cpu = run_case(pc, *cpu);
      EXPECT_EQ(r_cpu.verdict, Verdict::kPass) << c.id() << ": " << r_cpu.message;
      const CaseResult r_old = run_case(pc, *old);
      if (has_renamed) {
        ++renamed;
        EXPECT_EQ(r_old.verdict, Verdict::kError) << c.id();
        EXPECT_NE(r_old.message.find("no mask function for layer type 'linear_attention_"),
                  std::string::npos)
            << r_old.message;
      } else {
        EXPECT_EQ(r_old.verdict, Verdict::kPass) << c.id() << ": " << r_old.message;
      }
    }
  EXPECT_EQ(renamed, 1 + 1 + 10);  // smoke: qwen35-gdn; gate: it and 5 cache shapes x 2 paddings
}

}  // namespace
}  // namespace deltacheck::backends
