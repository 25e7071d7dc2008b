// What an operation's case.cc (ops/<op>/case.cc) builds its schema, generator and suite entries
// from: the case model's names, parameter specs, and the per-sequence input streams.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cases/case.h"
#include "cases/op.h"
#include "cases/rng.h"
#include "cases/suites.h"
#include "cases/tensor.h"

namespace deltacheck::ops {

using cases::CaseIdError;
using cases::DType;
using cases::GenOptions;
using cases::Layout;
using cases::merge;
using cases::OpSchema;
using cases::ParamSpec;
using cases::Stream;
using cases::SuiteBuilder;
using cases::Tensor;
using cases::TensorMap;
using cases::Tier;
using Case = cases::Case;
using SuiteParams = cases::Params;  // a suite entry's parameters (ops::<op>::Params is typed)

inline ParamSpec choice(std::string key, std::string def, std::vector<std::string> choices,
                        std::string help) {
  return {std::move(key), ParamSpec::Kind::kChoice, std::move(def), std::move(choices), 0, 0,
          std::move(help)};
}
inline ParamSpec integer(std::string key, std::string def, int64_t lo, int64_t hi,
                         std::string help) {
  return {std::move(key), ParamSpec::Kind::kInt, std::move(def), {}, lo, hi, std::move(help)};
}
inline ParamSpec seed_param() {
  return integer("seed", "0", 0, (int64_t{1} << 62), "generator seed");
}

// The stream of one tensor of sequence `s`, with the sequence's salt (the isolation probe's
// perturbation): values depend on (seed, tensor, sequence, element) only.
inline Stream sequence_stream(uint64_t seed, const GenOptions& o, const std::string& tensor,
                              int64_t s) {
  auto it = o.sequence_salt.find(s);
  const uint64_t salt = it == o.sequence_salt.end() ? 0 : it->second * 0x9E3779B97F4A7C15ull;
  return Stream(seed ^ salt, tensor + "/" + std::to_string(s));
}

}  // namespace deltacheck::ops
