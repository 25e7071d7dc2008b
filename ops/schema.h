// What an operation's case.cc (ops/<op>/case.cc) builds its schema, generator and suite entries
// from: the case model's names, parameter specs, and the per-sequence input streams.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cases/case.h"
#include "cases/op.h"
#include "cases/rng.h"
#include "cases/suites.h"
#include "cases/tensor.h"

namespace deltacheck::ops {

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

// A broken cross-parameter rule (OpSchema::check): InvalidArgument with the one-line message the
// case id's error shows.
inline Status invalid(std::string message) { return Status::InvalidArgument(std::move(message)); }

// The rule every operation with query/key and value heads keeps (gdr, layer, serve): HV % H == 0.
inline Status check_heads(const Case& c) {
  if (c.get_int("HV") % c.get_int("H") != 0)
    return invalid("HV % H != 0 (HV=" + c.get("HV") + ", H=" + c.get("H") + ")");
  return Status::Ok();
}

// The rules of the recurrent ops' cache modes (gdr, layer): cache=none takes no initial state,
// cache=decode one token per sequence.
inline Status check_none_and_decode(const Case& c) {
  const std::string& cache = c.get("cache");
  if (cache == "none" && c.get("state") != "none")
    return invalid("cache=none takes no initial state (state=" + c.get("state") + ")");
  if (cache == "decode")
    for (int64_t l : c.layout().lengths)
      if (l != 1) return invalid("cache=decode needs one token per sequence (packed[1*N])");
  return Status::Ok();
}

inline ParamSpec choice(std::string key, std::string def, std::vector<std::string> choices,
                        std::string help) {
  return {std::move(key), ParamSpec::Kind::kChoice, std::move(def), std::move(choices), 0, 0,
          std::move(help)};
}
inline ParamSpec integer(std::string key, std::string def, int64_t lo, int64_t hi,
                         std::string help) {
  return {std::move(key), ParamSpec::Kind::kInt, std::move(def), {}, lo, hi, std::move(help)};
}
// Free text the op's own check validates (no ( ) , = : they delimit case ids).
inline ParamSpec text(std::string key, std::string def, std::string help) {
  return {std::move(key), ParamSpec::Kind::kText, std::move(def), {}, 0, 0, std::move(help)};
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

// Padding tails of the gradient operations (gdr_grad, layer_grad). Fills rows [first, first +
// count) of token-major tensor t (`per` elements a token) with `value(stream, i)`; the tail belongs
// to no sequence, so its streams take no sequence salt.
template <typename Fn>
void fill_rows(Tensor& t, uint64_t seed, int64_t first, int64_t count, int64_t per, Fn value) {
  const Stream st(seed, "tail/" + t.name());
  for (int64_t i = 0; i < count * per; ++i) t.set(first * per + i, value(st, i));
}

// `t` with `tail` more token rows ([1, T + tail, ...]), filled by `value`.
template <typename Fn>
Tensor with_tail(const Tensor& t, int64_t tail, uint64_t seed, Fn value) {
  std::vector<int64_t> shape = t.shape();
  const int64_t rows = shape[1];
  int64_t per = 1;  // elements a token (a product, not numel / tokens: there may be no token)
  for (size_t i = 2; i < shape.size(); ++i) per *= shape[i];
  shape[1] += tail;
  Tensor out(t.name(), t.dtype(), shape);
  std::memcpy(out.data(), t.data(), t.nbytes());
  fill_rows(out, seed, rows, tail, per, value);
  return out;
}

}  // namespace deltacheck::ops
