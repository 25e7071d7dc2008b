// The SSD reference checked against itself: the FP64 chunked form equals the FP64 recurrence at
// every chunk size (two formulas, one contract), the fp32 baselines sit at fp32's distance from
// it and the activation-dtype-operand ones further, and the oracle is not degenerate.
#include <gtest/gtest.h>

#include <cmath>

#include "cases/case.h"
#include "cases/op.h"
#include "ops/ssd/params.h"
#include "reference/ssd.h"

namespace deltacheck {
namespace {

using cases::Case;

double rel(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

struct Problem {
  ops::ssd::Params d;
  cases::TensorMap in;
  std::vector<std::vector<double>> buffers;
  reference::SsdArgs args;
};

Problem problem(const std::string& id) {
  Problem p;
  const Case c = Case::parse(id);
  p.d = ops::ssd::decode(c);
  p.in = cases::find_op("ssd").generate(c, {});
  p.args = ops::ssd::reference_args(p.d, p.in, p.buffers);
  return p;
}

const char* kCases[] = {
    "ssd(layout=packed[255,0,257,64],seed=1)",
    "ssd(layout=packed[1,513,0,3],H=8,G=2,z=1,dt_limit=on,seed=2)",
    "ssd(layout=packed[300,0,40],decay=strong,state=mixed,seed=3)",
    "ssd(layout=batch[2x300],decay=weak,D=0,G=4,H=4,seed=4)",
    "ssd(layout=packed[63,0,257],dtype=bf16,z=1,seed=5)",
};

TEST(SsdReference, ChunkedFormEqualsTheRecurrenceInFp64) {
  for (const char* id : kCases) {
    Problem p = problem(id);
    const reference::SsdResult r = reference::ssd(p.args);
    for (int64_t chunk : {1, 7, 64, 256, 1024}) {
      reference::SsdArithmetic how;
      how.form = reference::SsdForm::kChunked;
      how.chunk_size = chunk;
      const reference::SsdResult k = reference::ssd(p.args, how);
      EXPECT_LT(rel(k.y, r.y), 1e-12) << id << " chunk " << chunk;
      EXPECT_LT(rel(k.final_state, r.final_state), 1e-12) << id << " chunk " << chunk;
    }
  }
}

TEST(SsdReference, OracleIsNotDegenerateAndEveryTermCounts) {
  Problem p = problem("ssd(layout=packed[100,0,257],z=1,dt_limit=on,seed=6)");
  const reference::SsdResult r = reference::ssd(p.args);
  // Dropping any term of the contract moves y far beyond fp32's distance.
  auto moved = [&](auto change) {
    reference::SsdArgs a = p.args;
    change(a);
    return rel(reference::ssd(a).y, r.y);
  };
  EXPECT_GT(rel(std::vector<double>(r.y.size(), 0.0), r.y), 0.99);
  EXPECT_GT(moved([](reference::SsdArgs& a) { a.D = nullptr; }), 1e-2);
  EXPECT_GT(moved([](reference::SsdArgs& a) { a.z = nullptr; }), 1e-2);
  EXPECT_GT(moved([](reference::SsdArgs& a) { a.dt_bias = nullptr; }), 1e-2);
  EXPECT_GT(moved([](reference::SsdArgs& a) {
              a.dt_max = INFINITY;
              a.dt_min = 0;
            }),
            1e-2);
  EXPECT_GT(moved([](reference::SsdArgs& a) { a.initial_state = nullptr; }), 1e-2);
}

TEST(SsdReference, BaselinesSitAtTheirPrecisionsDistance) {
  for (const char* id : kCases) {
    Problem p = problem(id);
    const reference::SsdResult r = reference::ssd(p.args);
    reference::SsdArithmetic rec32{reference::SsdForm::kRecurrent, true};
    reference::SsdArithmetic ch32{reference::SsdForm::kChunked, true};
    reference::SsdArithmetic lowp{reference::SsdForm::kChunked, true, reference::Rounding::kBF16};
    const double e_rec = rel(reference::ssd(p.args, rec32).y, r.y);
    const double e_ch = rel(reference::ssd(p.args, ch32).y, r.y);
    const double e_lowp = rel(reference::ssd(p.args, lowp).y, r.y);
    EXPECT_GT(e_rec, 0.0) << id;
    EXPECT_LT(e_rec, 1e-5) << id;
    EXPECT_GT(e_ch, 0.0) << id;
    EXPECT_LT(e_ch, 1e-5) << id;
    EXPECT_GT(e_lowp, 10 * e_ch) << id;
    EXPECT_LT(e_lowp, 3e-2) << id;
  }
}

}  // namespace
}  // namespace deltacheck
