// Fixture generation, preparation for the runner and drift checks.
#include "golden/fixtures.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cases/generate.h"
#include "cases/generator_version.h"
#include "harness/tolerance.h"

namespace deltacheck::golden {
namespace {

std::string specs_string(const std::vector<ops::OutputSpec>& specs) {
  std::string s;
  for (const auto& o : specs)
    s += fmt::format("{}{}:{}{}", s.empty() ? "" : ", ", o.name, cases::dtype_name(o.dtype),
                     cases::shape_string(o.shape));
  return s;
}

bool same_specs(const std::vector<ops::OutputSpec>& a, const std::vector<ops::OutputSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape)
      return false;
  return true;
}

// Where two tensors differ, or "" when they hold the same dtype, shape and bytes.
std::string input_difference(const cases::Tensor& stored, const cases::Tensor& fresh) {
  if (stored.dtype() != fresh.dtype() || stored.shape() != fresh.shape())
    return fmt::format("input '{}' is {}{} in the file, {}{} regenerated", stored.name(),
                       cases::dtype_name(stored.dtype()), cases::shape_string(stored.shape()),
                       cases::dtype_name(fresh.dtype()), cases::shape_string(fresh.shape()));
  const int es = cases::dtype_size(stored.dtype());
  const auto* a = static_cast<const uint8_t*>(stored.data());
  const auto* b = static_cast<const uint8_t*>(fresh.data());
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < stored.numel(); ++i)
    if (std::memcmp(a + i * es, b + i * es, es) != 0) {
      if (differ++ == 0) first = i;
    }
  if (differ == 0) return "";
  return fmt::format("input '{}': {} of {} elements differ, first at {} (file {}, regenerated {})",
                     stored.name(), differ, stored.numel(), first, stored.get(first),
                     fresh.get(first));
}

}  // namespace

FixtureCase make_fixture_case(const cases::Case& c) {
  const ops::Operation& op = ops::operation_for(c);
  FixtureCase fc{c,
                 cases::generate_inputs(c),
                 {},
                 op.outputs(c),
                 cases::kGeneratorVersion,
                 harness::TolerancePolicy::kId,
                 {}};
  fc.expected = op.oracle(c, fc.inputs);
  return fc;
}

Status check_stored(const FixtureCase& fc) {
  const std::string where = "case '" + fc.c.id() + "'";
  std::vector<ops::OutputSpec> specs;
  try {
    specs = ops::operation_for(fc.c).outputs(fc.c);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(where + ": " + e.what());
  }
  if (!same_specs(specs, fc.outputs))
    return Status::InvalidArgument(where + ": stored outputs (" + specs_string(fc.outputs) +
                                   ") differ from the operation's (" + specs_string(specs) + ")");
  for (const auto& s : specs)
    if (!fc.expected.count(s.name))
      return Status::InvalidArgument(where + ": expected/" + s.name + " missing");
  // A tolerance needs a finite expectation to measure against (exactly compared outputs, such as
  // additive masks, may hold infinities).
  if (!ops::operation_for(fc.c).exact(fc.c))
    for (const auto& [name, values] : fc.expected)
      for (size_t i = 0; i < values.size(); ++i)
        if (!std::isfinite(values[i]))
          return Status::InvalidArgument(
              fmt::format("{}: expected/{}: non-finite value {} at index {}: an expectation "
                          "compared with a tolerance must be finite",
                          where, name, values[i], i));
  return Status::Ok();
}

StatusOr<harness::PreparedCase> prepare_stored(FixtureCase fc) {
  if (Status st = check_stored(fc); !st.ok()) return st;
  // The operation's own specs: equal to the stored ones in name, dtype and shape, and they carry
  // what the file does not (ranges the operation does not compare, or needs unchanged).
  harness::PreparedCase pc{fc.c, std::move(fc.inputs), std::move(fc.expected), {}, {}};
  try {
    const ops::Operation& op = ops::operation_for(pc.c);
    pc.outputs = op.outputs(pc.c);
    pc.baselines = op.baselines(pc.c, pc.inputs, pc.precision);
    harness::measure_baselines(pc);
  } catch (const std::exception& e) {
    return Status::InvalidArgument("case '" + pc.c.id() +
                                   "': stored inputs do not fit the case: " + e.what());
  }
  return pc;
}

DriftReport check_drift(const FixtureCase& stored) {
  DriftReport r;
  auto drift = [&r](std::string why) {
    if (r.ok) r.problem = std::move(why);
    r.ok = false;
  };
  if (stored.generator_version != cases::kGeneratorVersion)
    drift(fmt::format("made by generator version {}, this build has version {}: regenerate it",
                      stored.generator_version, cases::kGeneratorVersion));
  FixtureCase fresh = make_fixture_case(stored.c);
  if (!same_specs(stored.outputs, fresh.outputs))
    drift("outputs (" + specs_string(stored.outputs) + ") differ from the operation's (" +
          specs_string(fresh.outputs) + ")");

  // Inputs: the same tensors, in the same order, bit for bit.
  const auto& a = stored.inputs.all();
  const auto& b = fresh.inputs.all();
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i >= a.size()) {
      drift("input '" + b[i].name() + "' is regenerated but not in the file");
    } else if (i >= b.size() || a[i].name() != b[i].name()) {
      drift("input '" + a[i].name() + "' is in the file but not regenerated in this position");
    } else if (std::string d = input_difference(a[i], b[i]); !d.empty()) {
      drift(d);
    }
  }

  // Expected outputs: within kDriftTolerance of each output's largest magnitude.
  const bool exact = ops::operation_for(stored.c).exact(stored.c);
  for (const auto& [name, want] : stored.expected) {
    auto it = fresh.expected.find(name);
    if (it == fresh.expected.end() || it->second.size() != want.size()) {
      drift("expected '" + name + "' is not regenerated with the same size");
      continue;
    }
    const std::vector<double>& got = it->second;
    double scale = 0.0, max_diff = 0.0;
    int64_t worst = -1;
    for (double x : want)
      if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
    for (size_t i = 0; i < want.size(); ++i) {
      // Equal values (infinities of additive masks included) and NaN against NaN do not differ.
      const bool same = got[i] == want[i] || (std::isnan(want[i]) && std::isnan(got[i]));
      const double d = same ? 0.0 : std::fabs(got[i] - want[i]);
      if (!(d <= max_diff)) {  // also catches NaN
        max_diff = std::isnan(d) ? INFINITY : d;
        worst = static_cast<int64_t>(i);
      }
    }
    const double rel = max_diff == 0.0 ? 0.0 : (scale > 0.0 ? max_diff / scale : INFINITY);
    r.max_rel_deviation = std::max(r.max_rel_deviation, rel);
    if (exact ? max_diff != 0.0 : !(rel <= kDriftTolerance))
      drift(
          fmt::format("expected '{}' drifted: max |Δ| {:.3e} at index {} (file {}, regenerated "
                      "{}), {:.3e} relative to max |expected| {:.3e} > {:.0e}",
                      name, max_diff, worst, want[worst], got[worst], rel, scale,
                      exact ? 0.0 : kDriftTolerance));
  }
  return r;
}

}  // namespace deltacheck::golden
