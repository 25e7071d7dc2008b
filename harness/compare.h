// Error metrics between an output and its FP64 expectation: max |Δ| with its index, relative RMS
// error ||Δ|| / ||ref||, NMSE, over a whole tensor or a slice of it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cases/tensor.h"

namespace deltacheck::harness {

struct Metrics {
  double max_abs = 0.0;
  int64_t max_index = -1;  // flat index of the max |Δ| (-1 when empty)
  double rel_rms = 0.0;    // ||Δ|| / ||ref||; ||Δ|| itself when ||ref|| == 0
  double nmse = 0.0;       // rel_rms^2
  double ref_max_abs = 0.0;
  double ref_rms = 0.0;  // sqrt(mean(ref^2)): the scale of the expectation
  int64_t count = 0;
  int64_t non_finite = 0;  // elements that are NaN or Inf in `actual` where ref is finite
};

Metrics measure(const std::vector<double>& actual, const std::vector<double>& expected,
                int64_t begin, int64_t end);
// The same for a tensor's own elements, converted to double on the fly (exactly, so the result
// has the same bits as measure(actual.to_double(), ...) without the FP64 copy).
Metrics measure(const cases::Tensor& actual, const std::vector<double>& expected, int64_t begin,
                int64_t end);

// Several measures of tensors in one threaded pass (their blocks share the threads): what a
// judge does with the outputs of a case. Each result has the bits measure() gives it alone.
struct MeasureRequest {
  const cases::Tensor* actual;
  const std::vector<double>* expected;
  int64_t begin, end;
};
std::vector<Metrics> measure_each(const std::vector<MeasureRequest>& requests);

// The signs of the errors Δ = actual - ref over [begin, end), for the rounding-bias check
// (harness/tolerance.h): per element, and per row of `row` consecutive elements (the innermost
// dimension: the elements a correct kernel's errors may move together, e.g. one token's values
// of one head, which one rounding of that head's state or scalar factor shifts as a whole).
struct ErrorSigns {
  // Elements whose Δ goes toward zero (Δ and ref of opposite signs), away from zero (the same
  // sign), up (Δ > 0) and down (Δ < 0); ref = 0 counts in up / down only, Δ = 0 nowhere.
  int64_t toward_zero = 0, away_from_zero = 0, up = 0, down = 0;
  // Over rows r, d_r = toward - away (e_r = up - down) in row r: the sums of d_r^2 and e_r^2,
  // with which a z-score counts rows, not elements, as the independent units.
  int64_t zero_sq = 0, up_sq = 0;
  int64_t rows = 0;  // rows with a non-zero error
};
// Non-finite elements count nowhere (the judge fails them before this matters).
ErrorSigns error_signs(const cases::Tensor& actual, const std::vector<double>& expected,
                       int64_t begin, int64_t end, int64_t row);
ErrorSigns error_signs(const std::vector<double>& actual, const std::vector<double>& expected,
                       int64_t begin, int64_t end, int64_t row);

// Tests only: measure with the portable two-lane loop even where the CPU has AVX2 (the results
// must not differ by a bit).
void set_portable_measure(bool portable);

// First token (0-based, within [begin, end)) whose largest |Δ| exceeds max_abs; -1 if none.
int64_t first_token_over(const std::vector<double>& actual, const std::vector<double>& expected,
                         int64_t begin, int64_t end, int64_t per_token, double max_abs);

// Largest |Δ| of each token in [begin, end) (for plots and leak analysis).
std::vector<double> token_errors(const std::vector<double>& actual,
                                 const std::vector<double>& expected, int64_t begin, int64_t end,
                                 int64_t per_token);

// Largest |Δ| of each head of each token of a [..., tokens, heads, per_token / heads] tensor:
// result[h][t] (per-head error plots).
std::vector<std::vector<double>> head_token_errors(const std::vector<double>& actual,
                                                   const std::vector<double>& expected,
                                                   int64_t per_token, int64_t heads);

// The worst of the baselines' errors on one output (whole tensor or one sequence): the largest
// relative RMS and the largest max |Δ| over every baseline, and which baseline had the larger
// relative RMS.
struct BaselineError {
  Metrics metrics;
  std::string name;
};

// Per output: [0] the whole tensor, then one per packed sequence (harness/runner.h).
using BaselineErrors = std::map<std::string, std::vector<BaselineError>>;

}  // namespace deltacheck::harness
