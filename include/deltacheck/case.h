// Cases and suites: what deltacheck checks. A case is an operation plus named parameters with one
// canonical printable id, e.g.
//   gdr(layout=packed[63,0,65],H=2,HV=4,K=64,V=64,dtype=bf16,gate=strong,...,seed=7)
// which is also its test name, report row and rerun argument. The inputs of a case are generated
// from its id (deterministically, the same bits on every machine); deltacheck computes the FP64
// expectation. `deltacheck list ops` lists the operations and their parameters, `deltacheck list`
// the suites.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/id_filter.h"
#include "cases/safe_text.h"
#include "cases/selection.h"
#include "cases/suites.h"
#include "cases/tensor.h"

namespace deltacheck {

// A case: op(), id(), get("key") / get_int / get_bool, seed(), with("key", "value") for a copy
// with one parameter changed. Equal cases have equal ids.
using Case = cases::Case;
// Thrown for an id that does not parse or names an unknown op, parameter or value.
using CaseIdError = cases::CaseIdError;
// The token layout of a case: c.layout() gives the sequence lengths, the
// batch, the row length T and cu_seqlens.
using Layout = cases::Layout;
// Element types of tensors: kF32, kBF16, kF16 (inputs and outputs), kF64, kI32, kI64, kU8.
using DType = cases::DType;
using cases::dtype_name;    // "fp32", "bf16", ...
using cases::dtype_size;    // bytes per element
using cases::shape_string;  // {2, 3} -> "[2, 3]"
// A named host tensor (dtype, shape, bytes). A backend reads its inputs and writes its outputs
// through these: data() / as<T>(), shape(), numel(). Outputs come poisoned (NaN) and guarded.
using Tensor = cases::Tensor;
// Named tensors of one case: at("q"), find("cu_seqlens") (null when absent), all().
using TensorMap = cases::TensorMap;
// Stores `n` floats into a buffer of a storage dtype (kF32, kBF16 or kF16; the half types as their
// raw 16-bit patterns), rounding to nearest even as the hardware converts and keeping NaN a NaN:
// the conversion deltacheck's own generator and kernels use. Throws std::invalid_argument for
// another dtype.
void store_floats(const float* src, int64_t n, DType dtype, void* dst);
// The reverse: `n` elements of a storage dtype as floats (exact: every bf16 / fp16 value is one).
void load_floats(const void* src, int64_t n, DType dtype, float* dst);
// A suite's name and what it is for.
using SuiteInfo = cases::SuiteInfo;

// Parses a case id: parameters in any order, omitted ones take their defaults. Throws
// CaseIdError naming the problem.
Case parse_case(const std::string& id);
// The same for an id deltacheck itself handed to a backend (a probe's derived case, such as a
// pack's zero-length sequence alone as single[0]): the rules for ids given from outside (the
// zero-token rule) are not applied, as the harness did not apply them when it derived the case.
Case parse_derived_case(const std::string& id);
// The id without the parameters that have their default values, e.g.
// "gdr(layout=packed[63,0,65],HV=4,dtype=bf16,gate=strong,seed=7)": shorter, and parse_case()
// reads it back as the same case.
std::string short_id(const Case& c);

// The operations and their case-id parameters, as `deltacheck list ops` prints them: op, help,
// params (key, default_value, help, kind, choices; min..max for integers).
using OpSchema = cases::OpSchema;
using ParamSpec = cases::ParamSpec;
const std::vector<OpSchema>& list_ops();

// The suites: smoke (seconds), gate (the CI gate), full (everything).
std::vector<SuiteInfo> list_suites();
// The cases of a suite in their fixed order; throws CaseIdError for an unknown suite.
std::vector<Case> suite(const std::string& name);

// Which cases to run: a suite (or explicit case ids), narrowed by regexes over the ids, optionally
// with every seed replaced, optionally one shard of it. Implicitly made from a suite name, so
// "gate" is a Selection. Example:
//   deltacheck::Selection("gate").filter("^gdr\\(").exclude("cache=(pool|spec)")
class Selection {
 public:
  Selection(std::string suite = "smoke");  // NOLINT: a suite name is a selection
  Selection(const char* suite);            // NOLINT
  // Exactly these case ids, in this order (instead of a suite).
  static Selection case_ids(std::vector<std::string> ids);

  // Keeps the cases whose id matches `regex` (RE2 syntax, matched in linear time, searched
  // anywhere in the id); several filters must all match.
  Selection& filter(std::string regex);
  // Drops the cases whose id matches `regex`.
  Selection& exclude(std::string regex);
  // Replaces every case's seed (same cases, other inputs).
  Selection& seed(int64_t seed);
  // Keeps case i of the selection when i % count == index (as `deltacheck run --shard I/N`).
  Selection& shard(int index, int count);

  const std::string& suite_name() const { return suite_; }
  const std::vector<std::string>& ids() const { return ids_; }
  const std::vector<std::string>& filters() const { return filters_; }
  const std::vector<std::string>& excludes() const { return excludes_; }
  int64_t seed_override() const { return seed_; }  // -1: none
  int shard_index() const { return shard_index_; }
  int shard_count() const { return shard_count_; }
  // One line for logs and reports, e.g. "suite gate, filter '^gdr\(', exclude 'cache=pool'".
  std::string describe() const;

 private:
  std::string suite_;
  std::vector<std::string> ids_;
  std::vector<std::string> filters_, excludes_;
  int64_t seed_ = -1;
  int shard_index_ = 0, shard_count_ = 1;
};

// The cases of a selection, in suite order. Throws CaseIdError (unknown suite, bad id) or
// std::invalid_argument (a regex that does not compile, a bad shard).
std::vector<Case> select(const Selection& selection);
// The same with positions: this shard's cases, each one's position among the cases selected
// before sharding (merged shards are ordered by it), and how many those are. A bad pattern is
// named `filter_name` / `exclude_name` in the error (the tool says "--filter").
using SelectedCases = cases::SelectedCases;
SelectedCases select_with_positions(const Selection& selection,
                                    const std::string& filter_name = "filter",
                                    const std::string& exclude_name = "exclude");
// A compiled pattern over case ids, as filters use it: IdFilter(regex, name).matches(id) (RE2,
// searched anywhere in the id); throws std::invalid_argument naming `name` for a bad pattern.
using IdFilter = cases::IdFilter;
// Text as one printable line for a message: control characters and invalid UTF-8 escaped, cut
// at max_bytes.
using cases::printable_line;

}  // namespace deltacheck
