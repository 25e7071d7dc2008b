// The leakage probes.
#include "harness/probes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "cases/generate.h"
#include "harness/call_plan.h"
#include "harness/repack.h"

namespace deltacheck::harness {
namespace {

using cases::Layout;
using cases::TensorMap;

struct Run {
  TensorMap outputs;
  std::string error;  // empty when the run succeeded
};

Run run_once(Backend& b, const cases::Case& c, const TensorMap& inputs,
             const std::vector<OutputSpec>& specs) {
  Run r{allocate_outputs(specs), ""};
  try {
    const Status st = execute(b, c, inputs, r.outputs);
    if (!st.ok()) r.error = st.message();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

ProbeReport report(const std::string& name, Verdict v, std::string detail = "") {
  return {name, v, std::move(detail)};
}

// Compares the rows of sequence `seq` (whole sequence) between two runs of possibly different
// layouts; returns "" when bit-identical, else a description of the first difference.
std::string compare_sequence(const Operation& op, const cases::Case& ca, const TensorMap& a,
                             int64_t seq_a, const cases::Case& cb, const TensorMap& b,
                             int64_t seq_b) {
  const Layout la = Layout::parse(ca.get("layout")), lb = Layout::parse(cb.get("layout"));
  for (const cases::Tensor& ta : a.all()) {
    const cases::Tensor* tb = b.find(ta.name());
    if (!tb) return fmt::format("output '{}' missing", ta.name());
    const TensorMajor m = op.major(ta.name());
    if (m == TensorMajor::kNone) continue;
    const int64_t len = la.lengths[seq_a];
    const auto ra = m == TensorMajor::kToken
                        ? row_bytes(ta, m, la.total_tokens(), token_row(la, seq_a, 0), len)
                        : row_bytes(ta, m, la.total_tokens(), seq_a, 1);
    const auto rb = m == TensorMajor::kToken
                        ? row_bytes(*tb, m, lb.total_tokens(), token_row(lb, seq_b, 0), len)
                        : row_bytes(*tb, m, lb.total_tokens(), seq_b, 1);
    if (ra != rb) {
      size_t i = 0;
      while (i < ra.size() && i < rb.size() && ra[i] == rb[i]) ++i;
      const size_t per_token = len > 0 ? ra.size() / static_cast<size_t>(len) : 0;
      if (m == TensorMajor::kToken && per_token > 0)
        return fmt::format("seq {} differs in '{}' from token {}", seq_a, ta.name(), i / per_token);
      return fmt::format("seq {} differs in '{}'", seq_a, ta.name());
    }
  }
  return "";
}

// Sequences to examine alone: all of a small pack, else the first two, the last and a few between.
std::vector<int64_t> sample_sequences(int64_t n) {
  std::vector<int64_t> s;
  if (n <= 8) {
    for (int64_t i = 0; i < n; ++i) s.push_back(i);
    return s;
  }
  for (int64_t i : {int64_t{0}, int64_t{1}, n / 3, n / 2, 2 * n / 3, n - 1}) s.push_back(i);
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

// For backends that are not batch-invariant: judge a variation of the case against its own
// expectation; anything but a pass is a leak of the probe `name`.
ProbeReport judge_variation(const std::string& name, Backend& b, const PreparedCase& variant,
                            const std::string& what) {
  const Run r = run_once(b, variant.c, variant.inputs, variant.outputs);
  if (!r.error.empty()) return report(name, Verdict::kError, r.error);
  const CaseResult j = judge(variant, r.outputs, b.name(), true);
  if (j.verdict == Verdict::kPass) return report(name, Verdict::kPass);
  return report(name, Verdict::kLeak, what + ": " + j.message);
}

ProbeReport probe_with_tolerance(const std::string& name, const PreparedCase& pc, Backend& b) {
  const Layout L = Layout::parse(pc.c.get("layout"));
  const int64_t n = L.num_seqs();
  if (name == "alone") {
    // Each sequence alone against its part of the pack, within that sequence's tolerance.
    const Operation& op = operation_for(pc.c);
    const Run pack = run_once(b, pc.c, pc.inputs, pc.outputs);
    if (!pack.error.empty()) return report(name, Verdict::kError, pack.error);
    for (int64_t s : sample_sequences(n)) {
      const PreparedCase alone = prepare_pieces(pc, {{s, 0, L.lengths[s]}});
      const Run r = run_once(b, alone.c, alone.inputs, alone.outputs);
      if (!r.error.empty()) return report(name, Verdict::kError, r.error);
      // The alone run, judged with the pack's part as its expectation.
      PreparedCase vs_pack = alone;
      for (auto& [out_name, values] : vs_pack.expected) {
        const std::vector<double> whole = pack.outputs.at(out_name).to_double();
        values = op.major(out_name) == TensorMajor::kSequence
                     ? row_values(whole, n, s, 1)
                     : row_values(whole, L.total_tokens(), token_row(L, s, 0), L.lengths[s]);
      }
      const CaseResult j = judge(vs_pack, r.outputs, b.name(), true);
      if (j.verdict != Verdict::kPass)
        return report(name, Verdict::kLeak,
                      "seq " + std::to_string(s) + " alone differs from the pack: " + j.message);
    }
    return report(name, Verdict::kPass);
  }
  if (name == "order") {
    std::vector<Piece> reversed;
    for (int64_t s = n - 1; s >= 0; --s) reversed.push_back({s, 0, L.lengths[s]});
    return judge_variation(name, b, prepare_pieces(pc, reversed), "pack reversed");
  }
  // isolation: alternate sequences regenerated, the whole case judged against its new oracle.
  cases::GenOptions g;
  for (int64_t s = 1; s < n; s += 2) g.sequence_salt[s] = 0x5eed + static_cast<uint64_t>(s);
  return judge_variation(name, b, prepare(pc.c, g), "neighbours regenerated");
}

ProbeReport probe_repeat(const PreparedCase& pc, Backend& b, const TensorMap& outputs) {
  const Run again = run_once(b, pc.c, pc.inputs, pc.outputs);
  if (!again.error.empty()) return report("repeat", Verdict::kError, again.error);
  for (const cases::Tensor& t : outputs.all())
    if (std::memcmp(t.data(), again.outputs.at(t.name()).data(), t.nbytes()) != 0)
      return report("repeat", Verdict::kFail,
                    fmt::format("two runs of the same case differ in '{}'", t.name()));
  return report("repeat", Verdict::kPass);
}

ProbeReport probe_isolation(const PreparedCase& pc, Backend& b, const TensorMap& outputs) {
  const Operation& op = operation_for(pc.c);
  const Layout L = Layout::parse(pc.c.get("layout"));
  const int64_t n = L.num_seqs();
  // Two runs: alternate sequences regenerated (the others must not move), then the others. An
  // empty sequence carries nothing between its neighbours unless states flow, so alternation
  // skips it then; with states its (regenerated) initial state is information too.
  const bool states = !op.carried_states(pc.c).empty();
  std::vector<int> group(static_cast<size_t>(n), -1);
  for (int64_t s = 0, k = 0; s < n; ++s)
    if (states || L.lengths[s] > 0) group[s] = static_cast<int>(k++ % 2);
  for (int parity = 0; parity < 2; ++parity) {
    cases::GenOptions g;
    for (int64_t s = 0; s < n; ++s)
      if (group[s] != parity) g.sequence_salt[s] = 0x5eed + static_cast<uint64_t>(s);
    const TensorMap inputs = cases::generate_inputs(pc.c, g);
    const Run r = run_once(b, pc.c, inputs, pc.outputs);
    if (!r.error.empty()) return report("isolation", Verdict::kError, r.error);
    for (int64_t s = 0; s < n; ++s) {
      if (group[s] != parity) continue;
      const std::string d = compare_sequence(op, pc.c, outputs, s, pc.c, r.outputs, s);
      if (!d.empty())
        return report("isolation", Verdict::kLeak, d + " when its neighbours' inputs change");
    }
  }
  return report("isolation", Verdict::kPass);
}

ProbeReport probe_alone(const PreparedCase& pc, Backend& b, const TensorMap& outputs) {
  const Operation& op = operation_for(pc.c);
  const Layout L = Layout::parse(pc.c.get("layout"));
  for (int64_t s : sample_sequences(L.num_seqs())) {
    const Repacked rp = repack(pc.c, pc.inputs, {{s, 0, L.lengths[s]}});
    const Run r = run_once(b, rp.c, rp.tensors, op.outputs(rp.c));
    if (!r.error.empty()) return report("alone", Verdict::kError, r.error);
    const std::string d = compare_sequence(op, pc.c, outputs, s, rp.c, r.outputs, 0);
    if (!d.empty()) return report("alone", Verdict::kLeak, d + " between the pack and alone");
  }
  return report("alone", Verdict::kPass);
}

ProbeReport probe_order(const PreparedCase& pc, Backend& b, const TensorMap& outputs) {
  const Operation& op = operation_for(pc.c);
  const Layout L = Layout::parse(pc.c.get("layout"));
  const int64_t n = L.num_seqs();
  std::vector<Piece> reversed;
  for (int64_t s = n - 1; s >= 0; --s) reversed.push_back({s, 0, L.lengths[s]});
  const Repacked rp = repack(pc.c, pc.inputs, reversed);
  const Run r = run_once(b, rp.c, rp.tensors, op.outputs(rp.c));
  if (!r.error.empty()) return report("order", Verdict::kError, r.error);
  for (int64_t s = 0; s < n; ++s) {
    const std::string d = compare_sequence(op, pc.c, outputs, s, rp.c, r.outputs, n - 1 - s);
    if (!d.empty()) return report("order", Verdict::kLeak, d + " when the pack is reversed");
  }
  return report("order", Verdict::kPass);
}

// Each sequence in two calls, cut mid-chunk; the second call starts from the first's states.
ProbeReport probe_split(const PreparedCase& pc, Backend& b) {
  const Operation& op = operation_for(pc.c);
  const Layout L = Layout::parse(pc.c.get("layout"));
  std::vector<Piece> first, second;
  for (int64_t s = 0; s < L.num_seqs(); ++s) {
    const int64_t len = L.lengths[s];
    const int64_t cut = len <= 1 ? len : std::max<int64_t>(1, (len / 2) | 1);
    first.push_back({s, 0, cut});
    second.push_back({s, cut, len - cut});
  }
  const Repacked r1 = repack(pc.c, pc.inputs, first);
  const Run a = run_once(b, r1.c, r1.tensors, op.outputs(r1.c));
  if (!a.error.empty()) return report("split", Verdict::kError, a.error);
  Repacked r2 = repack(pc.c, pc.inputs, second);
  for (const auto& [out, in] : op.carried_states(pc.c)) {
    cases::Tensor carried = a.outputs.at(out);
    cases::Tensor state(in, carried.dtype(), carried.shape());
    std::memcpy(state.data(), carried.data(), carried.nbytes());
    if (cases::Tensor* t = r2.tensors.find(in))
      *t = std::move(state);
    else
      r2.tensors.add(std::move(state));
  }
  const Run c2 = run_once(b, r2.c, r2.tensors, op.outputs(r2.c));
  if (!c2.error.empty()) return report("split", Verdict::kError, c2.error);
  // Reassemble the two calls in the original layout and judge against the oracle.
  TensorMap whole = allocate_outputs(pc.outputs);
  const int64_t total = L.total_tokens(), n = L.num_seqs();
  for (cases::Tensor& t : whole.all()) {
    const TensorMajor m = op.major(t.name());
    uint8_t* dst = static_cast<uint8_t*>(t.data());
    const size_t row = m == TensorMajor::kToken
                           ? (total > 0 ? t.nbytes() / static_cast<size_t>(total) : 0)
                           : t.nbytes() / static_cast<size_t>(std::max<int64_t>(1, n));
    int64_t off1 = 0, off2 = 0, t1 = 0, t2 = 0;
    for (int64_t s = 0; s < n; ++s) t1 += first[s].length, t2 += second[s].length;
    for (int64_t s = 0; s < n; ++s) {
      if (m == TensorMajor::kToken) {
        const auto p1 = row_bytes(a.outputs.at(t.name()), m, t1, off1, first[s].length);
        const auto p2 = row_bytes(c2.outputs.at(t.name()), m, t2, off2, second[s].length);
        uint8_t* at = dst + token_row(L, s, 0) * row;
        if (!p1.empty()) std::memcpy(at, p1.data(), p1.size());
        if (!p2.empty()) std::memcpy(at + p1.size(), p2.data(), p2.size());
        off1 += first[s].length;
        off2 += second[s].length;
      } else if (m == TensorMajor::kSequence) {
        const auto p = row_bytes(c2.outputs.at(t.name()), m, total, s, 1);
        std::memcpy(dst + s * row, p.data(), p.size());
      }
    }
  }
  const CaseResult j = judge(pc, whole, b.name(), true);
  if (j.verdict == Verdict::kPass) return report("split", Verdict::kPass);
  return report("split", Verdict::kFail,
                "two calls with carried state differ from one: " + j.message);
}

}  // namespace

std::vector<ProbeReport> run_probes(const PreparedCase& pc, Backend& b, const TensorMap& outputs) {
  std::vector<ProbeReport> out;
  const Operation& op = operation_for(pc.c);
  if (!op.repackable(pc.c)) return out;
  if (!b.deterministic()) {
    out.push_back(report("repeat", Verdict::kSkipped, "backend is not deterministic"));
  } else {
    out.push_back(probe_repeat(pc, b, outputs));
  }
  const Layout L = Layout::parse(pc.c.get("layout"));
  if (L.num_seqs() >= 2 && b.batch_invariant(pc.c)) {
    out.push_back(probe_isolation(pc, b, outputs));
    out.push_back(probe_alone(pc, b, outputs));
    out.push_back(probe_order(pc, b, outputs));
  } else if (L.num_seqs() >= 2) {
    for (const char* name : {"isolation", "alone", "order"})
      out.push_back(probe_with_tolerance(name, pc, b));
  }
  int64_t longest = 0;
  for (int64_t l : L.lengths) longest = std::max(longest, l);
  if (!op.carried_states(pc.c).empty() && longest >= 2) out.push_back(probe_split(pc, b));
  return out;
}

}  // namespace deltacheck::harness
