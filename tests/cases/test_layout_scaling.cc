// Layouts stay O(1) per query, copy and repeated parse however many sequences they hold: the
// probes and the runner copy or parse a case's layout once per sequence, which made a case of
// 40 000 one-token sequences take 31 s and a million (ids allow it) hours.
#include <gtest/gtest.h>

#include "cases/case.h"

namespace deltacheck::cases {
namespace {

TEST(LayoutScaling, CopyingAndReparsingAMillionSequencesIsConstantTime) {
  const std::string text = "packed[1*999999,7]";
  const Layout first = Layout::parse(text);
  ASSERT_EQ(first.num_seqs(), 1000000);
  EXPECT_EQ(first.total_tokens(), 999999 + 7);
  int64_t sum = 0;
  for (int64_t s = 0; s < 2000; ++s) {  // a probe's walk over the sequences
    const Layout L = Layout::parse(text);
    const Layout copy = L;
    // Constant time by construction, checked without a clock: a reparse is the remembered layout
    // and a copy shares its offsets (no million-entry vector built or copied).
    ASSERT_EQ(&L.cu_seqlens(), &first.cu_seqlens()) << "parse did not reuse the parsed layout";
    ASSERT_EQ(&copy.cu_seqlens(), &L.cu_seqlens()) << "a copy copied the offsets";
    sum += copy.cu_seqlens()[static_cast<size_t>(s * 500)] + copy.lengths[static_cast<size_t>(s)];
  }
  EXPECT_EQ(sum, int64_t{2000} + 500 * (int64_t{1999} * 2000 / 2));
}

TEST(LayoutScaling, OffsetsMatchTheLengths) {
  const Layout L = Layout::parse("packed[3,0,5*2]");
  EXPECT_EQ(L.cu_seqlens(), (std::vector<int64_t>{0, 3, 3, 8, 13}));
  const std::vector<int64_t>& lengths = L.lengths;
  EXPECT_EQ(lengths, (std::vector<int64_t>{3, 0, 5, 5}));
  EXPECT_EQ(Layout::parse("batch[3x4]").total_tokens(), 12);
  EXPECT_EQ(Layout().cu_seqlens(), std::vector<int64_t>{0});
}

}  // namespace
}  // namespace deltacheck::cases
