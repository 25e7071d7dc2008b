// Operations a case can name. Each operation is one definition — its case-id schema, its input
// generator and its part of each suite — in a folder of its own under ops/ (ops/<op>/case.cc),
// listed once in ops/registry.cc. cases/ knows the shape of a definition, not the operations:
// op_definitions() is declared here and defined by the registry (the one link from cases/ to
// ops/, resolved by the linker; no cases/ source includes ops/).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"

namespace deltacheck::cases {

struct GenOptions {
  // Per-sequence salts mixed into that sequence's streams (the isolation probe's perturbation).
  std::map<int64_t, uint64_t> sequence_salt;
};

using Params = std::vector<std::pair<std::string, std::string>>;

// Collects a suite's cases in order, dropping duplicates.
class SuiteBuilder {
 public:
  void add(const std::string& op, const Params& p);
  std::vector<Case> take() { return std::move(cases_); }

 private:
  std::set<std::string> seen_;
  std::vector<Case> cases_;
};

// `base` with the entries of `over` replacing or appended.
Params merge(Params base, const Params& over);

enum class Tier { kSmoke = 0, kGate = 1, kFull = 2 };

struct OpDefinition {
  OpSchema schema;
  TensorMap (*generate)(const Case&, const GenOptions&) = nullptr;
  int64_t (*input_bytes)(const Case&) = nullptr;  // estimate without allocating
  void (*suite)(SuiteBuilder&, Tier) = nullptr;
};

// Every operation, in registry order (ops/registry.cc).
const std::vector<OpDefinition>& op_definitions();
const OpDefinition& find_op(const std::string& op);  // throws CaseIdError

}  // namespace deltacheck::cases
