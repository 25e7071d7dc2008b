// Context-parallel gdr_grad cases: the two ranks' calls and the state passed between them.
#include "ops/gdr_grad/context_parallel.h"

#include <fmt/format.h>

#include <cstring>

#include "ops/decode.h"
#include "ops/gdr/params.h"
#include "reference/gated_delta_rule.h"

namespace deltacheck::ops::gdr_grad {
namespace {

using cases::Tensor;
using cases::TensorMap;

// Rank r's case and inputs: its pieces, with a dht for every sequence on rank 0 (the cut one's
// is passed back) and an initial state for every sequence on rank 1 (the cut one's is the state
// at the cut); the tensors passed between the ranks are filled in by run_context_parallel.
Repacked rank(const cases::Case& c, const Params& p, const CpSplit& s, int r, const TensorMap& in) {
  if (r == 0) return repack(c, in, s.rank0, {{"cp", "0"}, {"dht", "rand"}});
  return repack(c, in, s.rank1, {{"cp", "0"}, {"state", p.dh0() ? c.get("state") : "rand"}});
}

// The [rows, HV, K, V] fp32 tensor `name` of `m`, added as zeros where the case has none (no
// initial state, no dht: zero, as the contract reads their absence).
Tensor& state_rows(TensorMap& m, const std::string& name, int64_t rows, const gdr::Params& d) {
  if (Tensor* t = m.find(name)) return *t;
  Tensor& t = m.add(Tensor(name, cases::DType::kF32, {rows, d.HV, d.K, d.V}));
  std::memset(t.data(), 0, t.nbytes());
  return t;
}

}  // namespace

StatusOr<CpSplit> cp_split(const Params& p) {
  const cases::Layout& L = p.rule.layout;
  CpSplit s;
  s.seq = -1;
  int64_t begin = 0;
  for (int64_t i = 0; i < L.num_seqs(); ++i) {
    const int64_t len = L.lengths[i], end = begin + len;
    if (begin < p.cp && p.cp < end) {
      s.seq = i;
      s.at = p.cp - begin;
      s.rank0.push_back({i, 0, s.at});
      s.rank1.push_back({i, s.at, len - s.at});
    } else {
      (begin < p.cp ? s.rank0 : s.rank1).push_back({i, 0, len});
    }
    begin = end;
  }
  if (s.seq < 0)
    return Status::InvalidArgument(fmt::format(
        "cp={} cuts no sequence of {}: the cut must fall inside one (token 1 .. length - 1 of it)",
        p.cp, L.str()));
  return s;
}

std::pair<cases::Case, cases::Case> rank_cases(const cases::Case& c) {
  const Params p = decode(c);
  const CpSplit s = checked(cp_split(p));
  return {rank(c, p, s, 0, {}).c, rank(c, p, s, 1, {}).c};
}

StatusOr<Values> run_context_parallel(const cases::Case& c, const TensorMap& in,
                                      const RankRun& run) {
  const Params p = decode(c);
  const gdr::Params& d = p.rule;
  StatusOr<CpSplit> split = cp_split(p);
  if (!split.ok()) return split.status();
  const CpSplit& s = split.value();
  const int64_t per = d.HV * d.K * d.V;
  // The forward state at the cut: the FP64 oracle over the cut sequence's rank-0 tokens.
  const Repacked head = repack(c, in, {{s.seq, 0, s.at}}, {{"cp", "0"}});
  std::vector<std::vector<double>> buffers;
  const reference::GatedDeltaRuleResult forward =
      reference::gated_delta_rule(gdr::reference_args(decode(head.c).rule, head.tensors, buffers));
  Repacked r1 = rank(c, p, s, 1, in);
  Tensor& h0 = state_rows(r1.tensors, "initial_state", static_cast<int64_t>(s.rank1.size()), d);
  for (int64_t i = 0; i < per; ++i) h0.set(i, forward.final_state[i]);  // rank 1's first row
  StatusOr<Values> v1 = run(1, r1.c, r1.tensors);
  if (!v1.ok()) return v1.status();
  // Rank 1's dh0 of the cut sequence is the dht of rank 0's last.
  Repacked r0 = rank(c, p, s, 0, in);
  const int64_t last = static_cast<int64_t>(s.rank0.size()) - 1;
  Tensor& dht = state_rows(r0.tensors, "dht", last + 1, d);
  const std::vector<double>& passed = v1.value().at("dh0");
  for (int64_t i = 0; i < per; ++i) dht.set(last * per + i, passed[i]);
  StatusOr<Values> v0 = run(0, r0.c, r0.tensors);
  if (!v0.ok()) return v0.status();
  // The whole row: rank 0's tokens then rank 1's (B = 1, no tail); dh0 of the cut sequence and
  // those before it from rank 0, of the later ones from rank 1.
  Values out;
  for (const char* name : {"dq", "dk", "dv", "dg", "dbeta"}) {
    std::vector<double>& v = out[name] = v0.value().at(name);
    const std::vector<double>& b = v1.value().at(name);
    v.insert(v.end(), b.begin(), b.end());
  }
  if (p.dh0()) {
    std::vector<double>& v = out["dh0"] = v0.value().at("dh0");
    v.insert(v.end(), passed.begin() + per, passed.end());
  }
  return out;
}

std::string explain_rank(const cases::Case& c, int64_t seq, int64_t token) {
  const Params p = decode(c);
  if (p.cp == 0 || seq < 0) return "";
  const CpSplit s = checked(cp_split(p));
  const bool rank0 = seq < s.seq || (seq == s.seq && token < s.at);
  const std::string what =
      token < 0 ? fmt::format("seq {}'s dh0", seq) : fmt::format("seq {} token {}", seq, token);
  return fmt::format(
      "{} came from rank {}; the cut at token {} puts seq {}'s tokens [0, {}) on rank 0 and the "
      "rest on rank 1, whose dh0 for it is rank 0's dht",
      what, rank0 ? 0 : 1, p.cp, s.seq, s.at);
}

}  // namespace deltacheck::ops::gdr_grad
