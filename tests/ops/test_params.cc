// Typed parameters decoded once from a case id (ops/<op>/params.h), the one registry, and the
// layout a Case keeps parsed.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/suites.h"
#include "ops/gdr/params.h"
#include "ops/layer/params.h"
#include "ops/mask/params.h"
#include "ops/registry.h"

namespace deltacheck::ops {
namespace {

using cases::Case;
using cases::DType;

TEST(OpsParams, GdrDecodesEveryParameter) {
  const Case c = Case::parse(
      "gdr(layout=packed[63,0,65],H=2,HV=4,K=60,V=32,dtype=bf16,gate=tail,beta=wide,keys=pos,"
      "l2=0,state=mixed,cache=chunked,calls=5,seed=7)");
  const gdr::Params p = gdr::decode(c);
  EXPECT_EQ(p.layout.str(), "packed[63,0,65]");
  EXPECT_EQ(p.B, 1);
  EXPECT_EQ(p.T, 128);
  EXPECT_EQ(p.N, 3);
  EXPECT_EQ(p.H, 2);
  EXPECT_EQ(p.HV, 4);
  EXPECT_EQ(p.K, 60);
  EXPECT_EQ(p.V, 32);
  EXPECT_EQ(p.dtype, DType::kBF16);
  EXPECT_EQ(p.gate, gdr::Gate::kTail);
  EXPECT_EQ(p.beta, gdr::Beta::kWide);
  EXPECT_EQ(p.keys, gdr::Keys::kPos);
  EXPECT_FALSE(p.l2);
  EXPECT_EQ(p.state, gdr::State::kMixed);
  EXPECT_EQ(p.cache, gdr::Cache::kChunked);
  EXPECT_EQ(p.calls, 5);
  EXPECT_EQ(p.seed, 7u);
  EXPECT_TRUE(p.final_state);
  EXPECT_FALSE(p.pooled());
  EXPECT_STREQ(gdr::name(p.cache), "chunked");
}

TEST(OpsParams, GdrCacheModes) {
  const gdr::Params none = gdr::decode(Case::parse("gdr(cache=none,state=none)"));
  EXPECT_EQ(none.cache, gdr::Cache::kNone);
  EXPECT_FALSE(none.final_state);
  const gdr::Params spec = gdr::decode(Case::parse("gdr(layout=batch[6x3],cache=spec)"));
  EXPECT_TRUE(spec.pooled());
  EXPECT_EQ(spec.B, 6);
  EXPECT_EQ(spec.T, 3);
  EXPECT_FALSE(gdr::one_token_per_sequence(spec));
  const gdr::Params pool = gdr::decode(Case::parse("gdr(layout=packed[1*12],cache=pool,calls=3)"));
  EXPECT_TRUE(gdr::one_token_per_sequence(pool));
  EXPECT_EQ(gdr::pool_size(pool), 12 + 6 + 1);
  const std::vector<int32_t> slots = gdr::pool_slots(pool);
  ASSERT_EQ(slots.size(), 12u);
  for (size_t i = 0; i < slots.size(); ++i) EXPECT_EQ(slots[i] < 0, i >= 9) << i;
}

TEST(OpsParams, LayerDecodesEveryParameter) {
  const Case c = Case::parse(
      "layer(layout=packed[3,5],H=2,HV=4,K=8,V=16,W=3,bias=0,dtype=fp16,state=none,"
      "cache=dynamic,calls=2,seed=9)");
  const layer::Params p = layer::decode(c);
  EXPECT_EQ(p.T, 8);
  EXPECT_EQ(p.N, 2);
  EXPECT_EQ(p.D, 2 * 2 * 8 + 4 * 16);
  EXPECT_EQ(p.W, 3);
  EXPECT_FALSE(p.bias);
  EXPECT_EQ(p.dtype, DType::kF16);
  EXPECT_EQ(p.state, layer::State::kNone);
  EXPECT_EQ(p.cache, layer::Cache::kDynamic);
  EXPECT_TRUE(p.states());
  EXPECT_EQ(p.calls, 2);
  EXPECT_EQ(p.seed, 9u);
}

TEST(OpsParams, MaskDecodesEveryParameter) {
  const mask::Params m = mask::decode(Case::parse(
      "mask(B=2,q=1,kv=64,offset=37,cache=static,causal=1,window=16,chunk=0,padding=left,"
      "packed=mrope,format=additive-inf,dtype=bf16,seed=3)"));
  EXPECT_EQ(m.op, mask::Op::kMask);
  EXPECT_EQ(m.B, 2);
  EXPECT_EQ(m.q, 1);
  EXPECT_EQ(m.kv_length, 64);
  EXPECT_EQ(m.offset, 37);
  EXPECT_EQ(m.cache, mask::Cache::kStatic);
  EXPECT_EQ(m.window, 16);
  EXPECT_EQ(m.padding, mask::Padding::kLeft);
  EXPECT_EQ(m.packed, mask::Packed::kMrope);
  EXPECT_EQ(m.format, mask::Format::kAdditiveInf);
  EXPECT_EQ(m.dtype, DType::kBF16);
  EXPECT_EQ(m.seed, 3u);
  // kv=0: a dynamic cache holds exactly offset + q tokens.
  EXPECT_EQ(mask::decode(Case::parse("mask(q=1,offset=37,cache=dynamic)")).kv_length, 38);
  const mask::Params l = mask::decode(Case::parse("layers(pattern=linear+sliding+full)"));
  EXPECT_EQ(l.op, mask::Op::kLayers);
  EXPECT_EQ(l.layer_types,
            (std::vector<std::string>{"linear_attention", "sliding_attention", "full_attention"}));
  const mask::Params s = mask::decode(Case::parse("segments(source=padding,B=3,T=16,pad=right)"));
  EXPECT_EQ(s.op, mask::Op::kSegments);
  EXPECT_EQ(s.source, mask::Source::kPadding);
  EXPECT_EQ(s.B, 3);
  EXPECT_EQ(s.T, 16);
  EXPECT_EQ(s.pad, mask::Pad::kRight);
}

TEST(OpsParams, DecodingAnotherOpThrows) {
  EXPECT_THROW(gdr::decode(Case::parse("layer()")), std::invalid_argument);
  EXPECT_THROW(layer::decode(Case::parse("gdr()")), std::invalid_argument);
  EXPECT_THROW(mask::decode(Case::parse("gdr()")), std::invalid_argument);
}

TEST(OpsParams, CaseKeepsItsParsedLayout) {
  const Case c = Case::parse("gdr(layout=packed[3*2,0],seed=1)");
  ASSERT_TRUE(c.has_layout());
  EXPECT_EQ(c.layout().str(), c.get("layout"));
  EXPECT_EQ(std::vector<int64_t>(c.layout().lengths), (std::vector<int64_t>{3, 3, 0}));
  const Case copy = c;
  EXPECT_EQ(&copy.layout(), &c.layout());  // parsed once, shared by copies
  EXPECT_EQ(c.with("layout", "single[5]").layout().total_tokens(), 5);
  const Case m = Case::parse("segments()");
  EXPECT_FALSE(m.has_layout());
  EXPECT_THROW(m.layout(), cases::CaseIdError);
}

// Every operation is listed once, with its schema and its Operation; every suite case resolves
// to the registry's entry for its op.
TEST(OpsRegistry, EachOperationOnce) {
  std::set<std::string> names;
  for (const RegisteredOp& r : registry()) {
    EXPECT_TRUE(names.insert(r.definition.schema.op).second) << r.definition.schema.op;
    EXPECT_NE(r.operation, nullptr);
    EXPECT_NE(r.definition.generate, nullptr);
    EXPECT_EQ(find(r.definition.schema.op).value(), &r);
  }
  EXPECT_EQ(names, (std::set<std::string>{"gdr", "gdr_grad", "layer", "layer_grad", "mask",
                                          "layers", "segments", "serve", "ssd"}));
  for (const Case& c : cases::suite("smoke"))
    EXPECT_EQ(&operation_for(c), find(c.op()).value()->operation) << c.id();
  const deltacheck::StatusOr<const RegisteredOp*> nope = find("nope");
  ASSERT_FALSE(nope.ok());
  EXPECT_EQ(nope.status().message().rfind("unknown operation 'nope' (known: gdr, ", 0), 0u)
      << nope.status().message();
}

}  // namespace
}  // namespace deltacheck::ops
