// The mask, layers and segments case ids and generators: consistent cache parameters, named
// errors, and inputs that contain what the cases promise (padding in row 0, length-1 and
// non-zero-start packed segments, multimodal rows that differ from the text row, zero-length
// sequences in cu_seqlens).
#include <gtest/gtest.h>

#include "cases/generate.h"
#include "cases/suites.h"
#include "ops/mask/params.h"

namespace deltacheck::ops::mask {
namespace {

using cases::Case;
using cases::CaseIdError;
using cases::DType;
using cases::generate_inputs;
using cases::suite;
using cases::Tensor;
using cases::TensorMap;

std::string error_of(const std::string& id) {
  try {
    Case::parse(id);
  } catch (const CaseIdError& e) {
    return e.what();
  }
  return "no error";
}

TEST(MaskCaseId, CanonicalFormAndKvLength) {
  const Case c = Case::parse("mask(q=1,offset=37,cache=dynamic,window=16)");
  EXPECT_EQ(c.id(),
            "mask(B=1,q=1,kv=0,offset=37,cache=dynamic,causal=1,window=16,chunk=0,padding=none,"
            "packed=none,format=bool,dtype=fp32,seed=0)");
  EXPECT_EQ(mask_kv_length(c), 38);
  EXPECT_EQ(mask_kv_length(Case::parse("mask(q=4,kv=64,cache=static)")), 64);
  EXPECT_EQ(mask_layer_types("linear+sliding+full").value(),
            (std::vector<std::string>{"linear_attention", "sliding_attention", "full_attention"}));
  EXPECT_EQ(mask_layer_types("qwen35").value().size(), 8u);
  EXPECT_FALSE(mask_layer_types("linear+bogus").ok());
}

TEST(MaskCaseId, InconsistentParametersAreNamed) {
  EXPECT_NE(error_of("mask(q=4,kv=4,cache=static)").find("must exceed offset + q = 4"),
            std::string::npos);
  EXPECT_NE(error_of("mask(q=4,cache=dynamic)").find("offset must be > 0"), std::string::npos);
  EXPECT_NE(error_of("mask(q=4,offset=2)").find("offset must be 0"), std::string::npos);
  EXPECT_NE(error_of("mask(q=4,kv=9)").find("kv must be 0 or offset + q = 4"), std::string::npos);
  EXPECT_NE(error_of("mask(q=1,offset=3,cache=chunked)").find("q > 1"), std::string::npos);
  EXPECT_NE(error_of("mask(causal=0,window=4)").find("causal masks only"), std::string::npos);
  EXPECT_NE(error_of("mask(dtype=bf16)").find("additive masks only"), std::string::npos);
  EXPECT_NE(error_of("mask(q=65536,kv=65536,B=1)").find("2^28"), std::string::npos);
  EXPECT_NE(error_of("layers(pattern=full+mamba3)").find("unknown layer 'mamba3'"),
            std::string::npos);
  EXPECT_NE(error_of("layers(pattern=hybrid3,window=0)").find("window must be > 0"),
            std::string::npos);
  EXPECT_NE(error_of("segments(source=cu,B=2)").find("B must be 1"), std::string::npos);
}

TEST(MaskGenerate, SameIdSameInputs) {
  const Case c = Case::parse("mask(B=3,q=40,padding=left,packed=mrope,seed=5)");
  const TensorMap a = generate_inputs(c), b = generate_inputs(c);
  for (const char* name : {"padding_mask", "position_ids"})
    EXPECT_EQ(a.at(name).storage(), b.at(name).storage()) << name;
}

TEST(MaskGenerate, SuiteInputsContainWhatTheCasesPromise) {
  int length_one = 0, nonzero_start = 0, mrope_rows_differ = 0, zero_length = 0;
  for (const Case& c : suite("gate")) {
    if (!is_mask_op(c.op())) continue;
    const TensorMap in = generate_inputs(c);
    if (c.op() == "segments") {
      if (const Tensor* cu = in.find("cu_seqlens"))
        for (int64_t i = 0; i + 1 < cu->numel(); ++i)
          zero_length += cu->as<int64_t>()[i] == cu->as<int64_t>()[i + 1];
      continue;
    }
    const int64_t B = c.get_int("B"), q = c.get_int("q"), kv = mask_kv_length(c);
    const int64_t used = c.get_int("offset") + q;
    if (const Tensor* pad = in.find("padding_mask")) {
      int64_t real_in_row0 = 0;
      for (int64_t j = 0; j < kv; ++j) real_in_row0 += pad->as<uint8_t>()[j];
      EXPECT_LT(real_in_row0, used) << c.id() << ": row 0 is always padded";
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = used; j < kv; ++j)
          EXPECT_EQ(pad->as<uint8_t>()[b * kv + j], 0) << c.id() << ": unwritten slot is real";
    }
    if (const Tensor* pos = in.find("position_ids")) {
      const int64_t* p = pos->as<int64_t>();
      for (int64_t b = 0; b < B; ++b) {
        int64_t seg_start = 0;
        for (int64_t t = 1; t <= q; ++t) {
          if (t == q || p[b * q + t] - p[b * q + t - 1] != 1) {
            length_one += t - seg_start == 1;
            if (t < q) nonzero_start += p[b * q + t] != 0;
            seg_start = t;
          }
        }
      }
      if (pos->shape()[0] == 3)
        for (int64_t i = 0; i < B * q; ++i) mrope_rows_differ += p[i] != p[B * q + i];
    }
  }
  EXPECT_GT(length_one, 50);
  EXPECT_GT(nonzero_start, 50);
  EXPECT_GT(mrope_rows_differ, 20);
  EXPECT_GT(zero_length, 10);
}

}  // namespace
}  // namespace deltacheck::ops::mask
