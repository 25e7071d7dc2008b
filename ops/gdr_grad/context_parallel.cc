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

// Rank r's case and inputs: its pieces, with a dht for every sequence when its last piece
// continues on the next rank (passed back) and an initial state for every sequence when its first
// piece continues one from the previous rank (the state at the cut); the tensors passed between
// the ranks are filled in by run_context_parallel.
Repacked rank(const cases::Case& c, const Params& p, const std::vector<Piece>& pieces,
              const TensorMap& in) {
  const cases::Layout& L = p.rule.layout;
  std::vector<std::pair<std::string, std::string>> over{{"cp", "0"}};
  if (pieces.back().offset + pieces.back().length < L.lengths[pieces.back().seq])
    over.emplace_back("dht", "rand");
  if (pieces.front().offset > 0) over.emplace_back("state", p.dh0() ? c.get("state") : "rand");
  return repack(c, in, pieces, over);
}

// The [rows, HV, K, V] fp32 tensor `name` of `m`, added as zeros where the case has none (no
// initial state, no dht: zero, as the contract reads their absence).
Tensor& state_rows(TensorMap& m, const std::string& name, int64_t rows, const gdr::Params& d) {
  if (Tensor* t = m.find(name)) return *t;
  Tensor& t = m.add(Tensor(name, cases::DType::kF32, {rows, d.HV, d.K, d.V}));
  std::memset(t.data(), 0, t.nbytes());
  return t;
}

// The rank holding token `token` of sequence `seq` (token < 0: its first token), and the piece.
std::pair<int, const Piece*> holder(const CpSplit& s, int64_t seq, int64_t token) {
  const int64_t at = std::max<int64_t>(token, 0);
  for (size_t r = 0; r < s.ranks.size(); ++r)
    for (const Piece& x : s.ranks[r])
      if (x.seq == seq && (x.offset == at || (x.offset <= at && at < x.offset + x.length)))
        return {static_cast<int>(r), &x};
  return {-1, nullptr};
}

// A cp value as written in a case id: "S1+S2+...".
std::string cuts_text(const std::vector<int64_t>& cuts) {
  std::string out;
  for (int64_t x : cuts) out += (out.empty() ? "" : "+") + std::to_string(x);
  return out;
}

}  // namespace

StatusOr<std::vector<int64_t>> parse_cuts(const std::string& cp) {
  std::vector<int64_t> cuts;
  if (cp == "0") return cuts;
  size_t begin = 0;
  while (true) {
    const size_t end = std::min(cp.find('+', begin), cp.size());
    const std::string part = cp.substr(begin, end - begin);
    const bool digits = !part.empty() && part.size() <= 13 &&
                        part.find_first_not_of("0123456789") == std::string::npos && part[0] != '0';
    if (!digits)
      return Status::InvalidArgument(fmt::format(
          "cp={}: '{}' is not a token position (cp=0, cp=S or cp=S1+S2+..., S > 0)", cp, part));
    const int64_t v = std::stoll(part);
    if (!cuts.empty() && v <= cuts.back())
      return Status::InvalidArgument(
          fmt::format("cp={}: the cuts must ascend ({} after {})", cp, v, cuts.back()));
    cuts.push_back(v);
    if (end == cp.size()) return cuts;
    begin = end + 1;
  }
}

StatusOr<CpSplit> cp_split(const Params& p) {
  const cases::Layout& L = p.rule.layout;
  CpSplit s;
  s.cuts = p.cp;
  s.ranks.resize(p.cp.size() + 1);
  std::vector<bool> inside(p.cp.size(), false);
  int64_t begin = 0;
  for (int64_t i = 0; i < L.num_seqs(); ++i) {
    const int64_t len = L.lengths[i], end = begin + len;
    // The rank of the sequence's first token (of its place, when empty): cuts at or before it.
    size_t r = 0;
    while (r < p.cp.size() && p.cp[r] <= begin) ++r;
    int64_t from = 0;
    for (; r < p.cp.size() && p.cp[r] < end; ++r) {  // each cut inside the sequence
      inside[r] = true;
      s.ranks[r].push_back({i, from, p.cp[r] - begin - from});
      from = p.cp[r] - begin;
    }
    s.ranks[r].push_back({i, from, len - from});
    begin = end;
  }
  for (size_t r = 0; r < p.cp.size(); ++r) {
    if (inside[r]) continue;
    const bool one = p.cp.size() == 1;
    const std::string which =
        one ? "" : fmt::format(": the cut at token {}", p.cp[r]);  // of several
    return Status::InvalidArgument(fmt::format(
        "cp={}{} cuts no sequence of {}: {} cut must fall inside one (token 1 .. length - 1 of "
        "it)",
        cuts_text(p.cp), which, L.str(), one ? "the" : "each"));
  }
  return s;
}

std::vector<cases::Case> rank_cases(const cases::Case& c) {
  const Params p = decode(c);
  const CpSplit s = checked(cp_split(p));
  std::vector<cases::Case> out;
  for (const std::vector<Piece>& pieces : s.ranks) out.push_back(rank(c, p, pieces, {}).c);
  return out;
}

StatusOr<Values> run_context_parallel(const cases::Case& c, const TensorMap& in,
                                      const RankRun& run) {
  const Params p = decode(c);
  const gdr::Params& d = p.rule;
  StatusOr<CpSplit> split = cp_split(p);
  if (!split.ok()) return split.status();
  const CpSplit& s = split.value();
  const int64_t per = d.HV * d.K * d.V, R = static_cast<int64_t>(s.ranks.size());
  std::vector<Values> got(static_cast<size_t>(R));
  // From the last rank to the first; `passed`: the next rank's dh0 of its first piece.
  const std::vector<double>* passed = nullptr;
  for (int64_t r = R - 1; r >= 0; --r) {
    const std::vector<Piece>& pieces = s.ranks[r];
    Repacked rr = rank(c, p, pieces, in);
    const int64_t rows = static_cast<int64_t>(pieces.size());
    if (pieces.front().offset > 0) {
      // The forward state at the cut: the FP64 oracle over the sequence's tokens before it.
      const Piece& x = pieces.front();
      const Repacked head = repack(c, in, {{x.seq, 0, x.offset}}, {{"cp", "0"}});
      std::vector<std::vector<double>> buffers;
      const reference::GatedDeltaRuleResult forward = reference::gated_delta_rule(
          gdr::reference_args(decode(head.c).rule, head.tensors, buffers));
      Tensor& h0 = state_rows(rr.tensors, "initial_state", rows, d);
      for (int64_t i = 0; i < per; ++i) h0.set(i, forward.final_state[i]);  // its first row
    }
    if (passed) {  // the last piece continues on rank r + 1: its dht is that rank's dh0
      Tensor& dht = state_rows(rr.tensors, "dht", rows, d);
      for (int64_t i = 0; i < per; ++i) dht.set((rows - 1) * per + i, (*passed)[i]);
    }
    StatusOr<Values> v = run(static_cast<int>(r), rr.c, rr.tensors);
    if (!v.ok()) return v.status();
    got[r] = v.take();
    passed = pieces.front().offset > 0 ? &got[r].at("dh0") : nullptr;
  }
  // The whole row: every rank's tokens in rank order (B = 1, no tail); each sequence's dh0 from
  // the rank holding its first piece.
  Values out;
  for (const char* name : {"dq", "dk", "dv", "dg", "dbeta"}) {
    std::vector<double>& v = out[name];
    for (const Values& g : got) v.insert(v.end(), g.at(name).begin(), g.at(name).end());
  }
  if (p.dh0()) {
    std::vector<double>& v = out["dh0"];
    for (int64_t r = 0; r < R; ++r)
      for (size_t i = 0; i < s.ranks[r].size(); ++i)
        if (s.ranks[r][i].offset == 0) {
          const std::vector<double>& h = got[r].at("dh0");
          v.insert(v.end(), h.begin() + static_cast<int64_t>(i) * per,
                   h.begin() + static_cast<int64_t>(i + 1) * per);
        }
  }
  return out;
}

std::string explain_rank(const cases::Case& c, int64_t seq, int64_t token) {
  const Params p = decode(c);
  if (p.cp.empty() || seq < 0) return "";
  const CpSplit s = checked(cp_split(p));
  const auto [r, piece] = holder(s, seq, token);
  if (!piece) return "";
  const std::string what =
      token < 0 ? fmt::format("seq {}'s dh0", seq) : fmt::format("seq {} token {}", seq, token);
  return fmt::format(
      "{} came from rank {} of {}; the cuts at tokens {} put seq {}'s tokens [{}, {}) on rank "
      "{}{}",
      what, r, s.ranks.size(), cuts_text(s.cuts), seq, piece->offset, piece->offset + piece->length,
      r,
      piece->offset > 0 ? fmt::format(", started from the state at the cut, its dh0 handed back "
                                      "as rank {}'s dht",
                                      r - 1)
                        : "");
}

}  // namespace deltacheck::ops::gdr_grad
