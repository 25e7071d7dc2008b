// The case model: a case is an operation name plus named parameters, with one canonical printable
// id such as
//   gdr(layout=packed[63,0,65],H=2,HV=4,K=64,V=64,dtype=bf16,gate=strong,beta=rand,keys=norm,
//       l2=1,state=rand,cache=prefill,seed=7)
// The id is the filter key, the test name, the report row and the rerun argument: parse(format(c))
// == c, and every parameter the op knows is present in the canonical form, in schema order.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace deltacheck::cases {

// Ids are parsed and validated with errors as values (Case::make, Case::from_id,
// Layout::from_text, lookup_schema: InvalidArgument naming the problem). The throwing forms
// (the constructor, parse, find_schema) are for the edges (the tool, tests) and throw
// CaseIdError with the same message.
class CaseIdError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// One parameter of an operation: its key, default, and either a fixed set of choices or a kind.
struct ParamSpec {
  enum class Kind { kInt, kChoice, kLayout, kText };
  std::string key;
  Kind kind;
  std::string default_value;
  std::vector<std::string> choices;  // for kChoice
  int64_t min = 0, max = 0;          // for kInt (inclusive)
  std::string help;
  // A parameter added after case ids were pinned (goldens, findings): at its default it is absent
  // from the id and from params(), so every older id stays what it was.
  bool absent_by_default = false;
};

class Case;
struct Layout;

struct OpSchema {
  std::string op;
  std::string help;
  std::vector<ParamSpec> params;
  // Rules that span parameters (e.g. HV % H == 0): InvalidArgument naming the broken rule, Ok
  // when the case keeps them. Runs on a case whose every parameter is valid. May be null.
  Status (*check)(const Case&) = nullptr;
  // Rules for a case given from outside (an id, a suite entry, parameters through the API) that
  // the variations the harness derives from one (Case::with, Case::derive: a pack's sequence run
  // alone, a piece of a split) need not keep: a zero-length sequence of a pack, run alone, holds
  // no token. May be null.
  Status (*check_given)(const Case&) = nullptr;
};

// All operations a case id may name.
const std::vector<OpSchema>& op_schemas();
StatusOr<const OpSchema*> lookup_schema(const std::string& op);
const OpSchema& find_schema(const std::string& op);  // throws CaseIdError

class Case {
 public:
  // Builds a case from an op and parameters; missing parameters take defaults, then validated.
  static StatusOr<Case> make(std::string op,
                             const std::vector<std::pair<std::string, std::string>>& params);
  // The same for a case derived from another (OpSchema::check_given is not applied).
  static StatusOr<Case> derive(std::string op,
                               const std::vector<std::pair<std::string, std::string>>& params);
  // Parses a case id (any spelling; the case's id() is the canonical one). `given`: the id comes
  // from outside (OpSchema::check_given applies); false for an id deltacheck derived itself and
  // hands back, such as a probe's case (a pack's zero-length sequence alone is single[0]).
  static StatusOr<Case> from_id(const std::string& id, bool given = true);
  // The same, throwing CaseIdError naming the problem.
  Case(std::string op, const std::vector<std::pair<std::string, std::string>>& params);
  static Case parse(const std::string& id);

  const std::string& op() const { return op_; }
  const std::string& id() const { return id_; }
  const std::string& get(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  bool get_bool(const std::string& key) const { return get_int(key) != 0; }
  uint64_t seed() const { return static_cast<uint64_t>(get_int("seed")); }
  bool has(const std::string& key) const;
  // The case's token layout (its `layout` parameter), parsed once when the case was built;
  // throws CaseIdError for an op without one.
  const Layout& layout() const;
  bool has_layout() const { return layout_ != nullptr; }
  // A copy with one parameter changed (re-validated, new id).
  Case with(const std::string& key, const std::string& value) const;
  // A copy with several parameters changed at once (validated together).
  Case with(const std::vector<std::pair<std::string, std::string>>& changes) const;
  const std::vector<std::pair<std::string, std::string>>& params() const { return params_; }

  bool operator==(const Case& o) const { return id_ == o.id_; }

 private:
  Case() = default;
  static StatusOr<Case> build(std::string op,
                              const std::vector<std::pair<std::string, std::string>>& params,
                              bool given);
  std::string op_;
  std::vector<std::pair<std::string, std::string>> params_;  // schema order, canonical values
  std::string id_;
  std::shared_ptr<const Layout> layout_;  // shared by copies
};

// Read-only sequence lengths shared between copies: copying a Layout is O(1), whatever the
// number of sequences (the probes copy the case's layout once per sequence).
class SeqLengths {
 public:
  SeqLengths() : v_(std::make_shared<const std::vector<int64_t>>()) {}
  explicit SeqLengths(std::vector<int64_t> v)
      : v_(std::make_shared<const std::vector<int64_t>>(std::move(v))) {}
  const int64_t& operator[](size_t i) const { return (*v_)[i]; }
  const int64_t& at(size_t i) const { return v_->at(i); }
  size_t size() const { return v_->size(); }
  bool empty() const { return v_->empty(); }
  std::vector<int64_t>::const_iterator begin() const { return v_->begin(); }
  std::vector<int64_t>::const_iterator end() const { return v_->end(); }
  operator const std::vector<int64_t>&() const { return *v_; }  // NOLINT: reads as the vector

 private:
  std::shared_ptr<const std::vector<int64_t>> v_;
};

// Packing layout of the token dimension.
//   single[T]          one sequence, B = 1, no cu_seqlens
//   batch[BxT]         B sequences of equal length T, no cu_seqlens
//   packed[l0,l1,...]  B = 1, sequences of the given lengths packed with cu_seqlens;
//                      "L*N" repeats length L N times, e.g. packed[3*50,700]
// Every query and every copy is O(1) (offsets are computed once by parse(), which remembers the
// last few layouts it parsed on each thread), so code that walks the sequences, copying or
// parsing the layout per sequence, stays O(sequences) with a million of them.
struct Layout {
  enum class Kind { kSingle, kBatch, kPacked };
  Kind kind = Kind::kSingle;
  SeqLengths lengths;  // one entry per sequence
  int64_t batch() const { return kind == Kind::kBatch ? static_cast<int64_t>(lengths.size()) : 1; }
  int64_t row_length() const;  // T of the [B, T, ...] tensors
  int64_t num_seqs() const { return static_cast<int64_t>(lengths.size()); }
  int64_t total_tokens() const { return cu_seqlens().back(); }
  bool has_cu_seqlens() const { return kind == Kind::kPacked; }
  // Token offsets of each sequence in the flat order (num_seqs() + 1 entries).
  const std::vector<int64_t>& cu_seqlens() const { return *cu_; }
  std::string str() const;  // canonical form
  static StatusOr<Layout> from_text(const std::string& s);
  static Layout parse(const std::string& s);  // throws CaseIdError

 private:
  // This layout with other lengths (and their offsets).
  Layout with_lengths(std::vector<int64_t> lengths) const;
  std::shared_ptr<const std::vector<int64_t>> cu_ =
      std::make_shared<const std::vector<int64_t>>(1, 0);
};

}  // namespace deltacheck::cases
