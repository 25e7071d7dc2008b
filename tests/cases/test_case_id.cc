// Case ids: canonical form, round trip, defaults, and one clear error per malformed id.
#include <gtest/gtest.h>

#include "cases/case.h"
#include "cases/generate.h"
#include "cases/suites.h"

namespace deltacheck::cases {
namespace {

TEST(CaseId, CanonicalFormHasEveryParameterInSchemaOrder) {
  const Case c = Case::parse("gdr(seed=7, dtype=bf16,layout=packed[63,0,65],HV=4)");
  EXPECT_EQ(c.id(),
            "gdr(layout=packed[63,0,65],H=2,HV=4,K=64,V=64,dtype=bf16,gate=weak,beta=rand,"
            "keys=norm,l2=1,state=rand,cache=prefill,calls=3,seed=7)");
  EXPECT_EQ(Case::parse(c.id()), c);
  EXPECT_EQ(c.get_int("HV"), 4);
  EXPECT_EQ(c.with("seed", "8").get("seed"), "8");
}

TEST(CaseId, EverySuiteCaseRoundTrips) {
  for (const auto& s : list_suites())
    for (const Case& c : suite(s.name)) ASSERT_EQ(Case::parse(c.id()).id(), c.id());
}

TEST(CaseId, LayoutsCanonicalize) {
  EXPECT_EQ(Layout::parse("packed[3,3,3,3,700,5,5]").str(), "packed[3*4,700,5,5]");
  EXPECT_EQ(Layout::parse("packed[1*2,1]").str(), "packed[1*3]");
  const Layout b = Layout::parse("batch[4x16]");
  EXPECT_EQ(b.batch(), 4);
  EXPECT_EQ(b.row_length(), 16);
  EXPECT_EQ(b.num_seqs(), 4);
  const Layout p = Layout::parse("packed[0,5,0]");
  EXPECT_EQ(p.cu_seqlens(), (std::vector<int64_t>{0, 0, 5, 5}));
}

TEST(CaseId, MalformedIdsNameTheProblem) {
  auto message = [](const std::string& id) {
    try {
      Case::parse(id);
    } catch (const CaseIdError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("gdr(H=3,HV=4)").find("HV % H"), std::string::npos);
  EXPECT_NE(message("gdr(foo=1)").find("unknown parameter 'foo'"), std::string::npos);
  EXPECT_NE(message("nope(H=1)").find("unknown operation 'nope'"), std::string::npos);
  EXPECT_NE(message("gdr(dtype=fp8)").find("not one of"), std::string::npos);
  EXPECT_NE(message("gdr(K=abc)").find("not an integer"), std::string::npos);
  EXPECT_NE(message("gdr(K=0)").find("outside"), std::string::npos);
  EXPECT_NE(message("gdr(layout=packed[1,-2])").find("not a length"), std::string::npos);
  EXPECT_NE(message("gdr(layout=packed[1,2)").find("unbalanced"), std::string::npos);
  EXPECT_NE(message("gdr(H=1,H=2)").find("given twice"), std::string::npos);
  EXPECT_NE(message("gdr").find("expected op(key=value"), std::string::npos);
  EXPECT_NE(message("gdr(cache=none)").find("takes no initial state"), std::string::npos);
}

// The same refusals as values: Case::from_id, Case::make, Layout::from_text and lookup_schema
// return InvalidArgument with exactly the message the throwing forms carry, and a value for a
// good id equal to what they return.
TEST(CaseId, ErrorsComeBackAsValuesWithTheSameMessages) {
  for (const std::string id :
       {"gdr(H=3,HV=4)", "gdr(foo=1)", "nope(H=1)", "gdr(dtype=fp8)", "gdr(K=abc)", "gdr(K=0)",
        "gdr(K=99999999999999999999999)", "gdr(layout=packed[1,-2])", "gdr(layout=packed[1,2)",
        "gdr(layout=packed[1,2]])", "gdr(H=1,H=2)", "gdr", "gdr(x)", "gdr(cache=none)",
        "gdr(seed=\x01)", "gdr(layout=tiled[4])", "gdr(layout=batch[0x4])"}) {
    SCOPED_TRACE(id);
    const StatusOr<Case> v = Case::from_id(id);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
    try {
      Case::parse(id);
      ADD_FAILURE() << "parse() accepted what from_id() refused";
    } catch (const CaseIdError& e) {
      EXPECT_EQ(v.status().message(), e.what());
    }
  }
  const StatusOr<Case> good = Case::from_id("gdr(seed=7, layout=packed[3,3,3])");
  ASSERT_TRUE(good.ok()) << good.status().message();
  EXPECT_EQ(good.value(), Case::parse("gdr(layout=packed[3*3],seed=7)"));
  EXPECT_EQ(good.value().layout().str(), "packed[3*3]");

  const StatusOr<Case> made = Case::make("gdr", {{"HV", "4"}, {"H", "3"}});
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("HV % H"), std::string::npos);
  ASSERT_TRUE(Case::make("gdr", {{"HV", "4"}}).ok());

  const StatusOr<Layout> bad = Layout::from_text("packed[]");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "layout 'packed[]': no sequences");
  ASSERT_TRUE(Layout::from_text("packed[5,0]").ok());
  EXPECT_EQ(Layout::from_text("batch[2x3]").value().total_tokens(), 6);

  const StatusOr<const OpSchema*> schema = lookup_schema("gdr_nope");
  ASSERT_FALSE(schema.ok());
  EXPECT_NE(schema.status().message().find("unknown operation 'gdr_nope' (known: "),
            std::string::npos);
  ASSERT_TRUE(lookup_schema("mask").ok());
  EXPECT_EQ(lookup_schema("mask").value()->op, "mask");
}

// Every op's cross-parameter rules (OpSchema::check) come back as values, with the messages the
// CLI has always printed (pinned here byte for byte), and parse() throws the same.
TEST(CaseId, CrossParameterRulesComeBackAsValues) {
  const std::vector<std::pair<std::string, std::string>> broken{
      {"gdr(H=3,HV=4)", "HV % H != 0 (HV=4, H=3)"},
      {"gdr(cache=none)", "cache=none takes no initial state (state=rand)"},
      {"gdr(cache=decode,layout=packed[1,2])",
       "cache=decode needs one token per sequence (packed[1*N])"},
      {"gdr(cache=spec,layout=packed[2,3])",
       "cache=spec needs sequences of equal length (batch[NxT]: T drafts)"},
      {"gdr(calls=65)",
       "calls must be <= 64 for cache=prefill (calls=65; only cache=ckpt takes block sizes up to "
       "2048)"},
      {"gdr(cache=decode,calls=65,layout=packed[1*4])",
       "calls must be <= 64 for cache=decode (calls=65; only cache=ckpt takes block sizes up to "
       "2048)"},
      {"gdr(cache=ckpt,state=none)",
       "cache=ckpt takes the block size in calls: 16..2048 tokens (calls=3)"},
      {"gdr(cache=pool,state=none)", "cache=pool reads states from a pool: state must not be none"},
      {"gdr(cache=spec,state=none,layout=batch[2x3])",
       "cache=spec reads states from a pool: state must not be none"},
      {"serve(contract=serving,block=8)",
       "contract=serving checkpoints through cache=ckpt, whose blocks are 16..2048 tokens "
       "(block=8)"},
      {"layer(layout=batch[2x4])",
       "layer cases are packed or single (the layer takes [T, D] rows)"},
      {"mask(cache=static,kv=10)",
       "cache=static: kv (max_cache_len) must exceed offset + q = 16 (kv=10)"},
      {"mask(cache=none,kv=5)", "cache=none: kv must be 0 or offset + q = 16 (kv=5)"},
      {"mask(offset=3)", "cache=none: no cached tokens, offset must be 0 (offset=3)"},
      {"mask(cache=dynamic)", "cache=dynamic: needs cached tokens, offset must be > 0"},
      {"mask(cache=chunked,q=1,offset=4)",
       "cache=chunked: a chunked-prefill call has q > 1 (a decode step is cache=dynamic)"},
      {"mask(cache=chunked,offset=0)", "cache=chunked: needs cached tokens, offset must be > 0"},
      {"mask(B=1024,q=1048576,kv=0)", "mask of B * q * kv > 2^28 elements"},
      {"mask(causal=0,window=4)", "window and chunk are defined for causal masks only (causal=0)"},
      {"mask(format=bool,dtype=bf16)",
       "dtype applies to additive masks only (format=bool takes dtype=fp32)"},
      {"layers(pattern=foo)",
       "pattern 'foo': unknown layer 'foo' (named patterns: qwen35, qwen35-gdn, hybrid3, "
       "all-linear, all-full; or a+b+... of linear, full, sliding, chunked, mamba, mamba2, gdn)"},
      {"layers(pattern=linear+bogus)",
       "pattern 'linear+bogus': unknown layer 'bogus' (named patterns: qwen35, qwen35-gdn, "
       "hybrid3, all-linear, all-full; or a+b+... of linear, full, sliding, chunked, mamba, "
       "mamba2, gdn)"},
      {"layers(pattern=)",
       "pattern '': unknown layer '' (named patterns: qwen35, qwen35-gdn, hybrid3, all-linear, "
       "all-full; or a+b+... of linear, full, sliding, chunked, mamba, mamba2, gdn)"},
      {"layers(pattern=sliding,window=0)",
       "pattern has sliding_attention layers: window must be > 0"},
      {"layers(pattern=chunked,chunk=0)",
       "pattern has chunked_attention layers: chunk must be > 0"},
      {"segments(source=cu,B=2)", "source=cu: cu_seqlens index one flat row, B must be 1"},
      {"segments(B=4096,T=67108864)", "B * T > 2^26 tokens"},
      {"gdr_grad(layout=single[8],tail=3)",
       "tail=3 needs a packed layout (tokens past cu_seqlens[-1]); got single[8]"},
      {"gdr_grad(layout=batch[2x8],tail=1)",
       "tail=1 needs a packed layout (tokens past cu_seqlens[-1]); got batch[2x8]"},
      {"gdr_grad(layout=packed[63,0,65],cp=63)",
       "cp=63 cuts no sequence of packed[63,0,65]: the cut must fall inside one (token 1 .. length "
       "- 1 of it)"},
      {"gdr_grad(layout=packed[63,0,65],cp=128)",
       "cp=128 cuts no sequence of packed[63,0,65]: the cut must fall inside one (token 1 .. "
       "length - 1 of it)"},
      {"gdr_grad(layout=packed[63,0,65],cp=500)",
       "cp=500 cuts no sequence of packed[63,0,65]: the cut must fall inside one (token 1 .. "
       "length - 1 of it)"},
      {"gdr_grad(layout=batch[2x8],cp=3)",
       "cp=3 cuts one packed row: needs a packed or single layout, got batch[2x8]"},
      {"gdr_grad(layout=packed[8,8],cp=3,tail=2)", "cp and tail cannot be combined"},
      {"gdr_grad(layout=packed[8,8],cp=8)",
       "cp=8 cuts no sequence of packed[8,8]: the cut must fall inside one (token 1 .. length - 1 "
       "of it)"},
      {"gdr(cache=tree,layout=packed[2,3])",
       "cache=tree needs layout batch[NxT] (N requests of T draft tokens)"},
      {"gdr(cache=accept,layout=single[4])",
       "cache=accept needs layout batch[NxT] (N sequences of 1 + k tokens)"},
      {"gdr(cache=tree,layout=batch[2x3],state=none)",
       "cache=tree reads states from a pool: state must not be none"},
      {"gdr(cache=accept,layout=batch[2x3],state=none)",
       "cache=accept reads states from a pool: state must not be none"},
      {"gdr_grad(H=3,HV=4)", "HV % H != 0 (HV=4, H=3)"},
      {"layer_grad(H=3,HV=4)", "HV % H != 0 (HV=4, H=3)"},
      {"layer_grad(layout=batch[2x8])",
       "layer cases are packed or single (the layer takes [T, D] rows)"},
      {"serve(H=3,HV=4)", "HV % H != 0 (HV=4, H=3)"},
      {"layer(H=3,HV=4)", "HV % H != 0 (HV=4, H=3)"},
      {"layer(cache=none)", "cache=none takes no initial state (state=rand)"},
      {"layer(cache=decode,layout=packed[1,2])",
       "cache=decode needs one token per sequence (packed[1*N])"},
  };
  for (const auto& [id, rule] : broken) {
    SCOPED_TRACE(id);
    const StatusOr<Case> v = Case::from_id(id);
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(v.status().message(), "case id '" + id + "': " + rule);
    try {
      Case::parse(id);
      ADD_FAILURE() << "parse() accepted what from_id() refused";
    } catch (const CaseIdError& e) {
      EXPECT_EQ(v.status().message(), e.what());
    }
  }
}

TEST(Generate, SameSeedSameBitsAndSequencesIndependentOfNeighbours) {
  const Case a = Case::parse("gdr(layout=packed[5,7],dtype=bf16,seed=3)");
  const TensorMap x = generate_inputs(a), y = generate_inputs(a);
  for (const Tensor& t : x.all()) EXPECT_EQ(t.storage(), y.at(t.name()).storage()) << t.name();
  // Regenerating sequence 1 changes only its tokens.
  GenOptions o;
  o.sequence_salt[1] = 99;
  const TensorMap z = generate_inputs(a, o);
  const Tensor &q0 = x.at("q"), &q1 = z.at("q");
  const int64_t per_token = 2 * 64;
  for (int64_t i = 0; i < 5 * per_token; ++i) ASSERT_EQ(q0.get(i), q1.get(i));
  int differ = 0;
  for (int64_t i = 5 * per_token; i < 12 * per_token; ++i) differ += q0.get(i) != q1.get(i);
  EXPECT_GT(differ, 6 * per_token);
}

TEST(Generate, RegimesProduceTheirRanges) {
  const TensorMap m = generate_inputs(Case::parse("gdr(layout=single[130],gate=tail,beta=one)"));
  const Tensor& g = m.at("g");
  const int64_t HV = 2;
  for (int64_t t = 0; t < 130; ++t)
    for (int64_t h = 0; h < HV; ++h) {
      const double x = g.get(t * HV + h);
      if (t >= 128) {
        EXPECT_LE(x, -30.0);
        EXPECT_GE(x, -60.0);
      } else {
        EXPECT_LT(x, 0.0);
        EXPECT_GT(x, -0.7);
      }
    }
  for (int64_t i = 0; i < m.at("beta").numel(); ++i) EXPECT_EQ(m.at("beta").get(i), 1.0);
  EXPECT_FALSE(m.has("cu_seqlens"));
  EXPECT_TRUE(generate_inputs(Case::parse("gdr(layout=packed[2,3])")).has("cu_seqlens"));
}

}  // namespace
}  // namespace deltacheck::cases
