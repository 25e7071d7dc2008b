// The leakage probes (see probes.h for what each asks).
#include "harness/probes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <system_error>

#include "cases/generate.h"
#include "harness/call_plan.h"
#include "harness/op_names.h"

namespace deltacheck::harness {
namespace {

using cases::Layout;
using cases::TensorMap;

struct Run {
  TensorMap outputs;
  std::string error;      // empty when the run succeeded
  bool declined = false;  // the backend said it cannot run this variation (error: its reason)
};

// `inputs_copy`: a copy of `inputs` taken ahead for a backend that checks its inputs (or null).
Run run_once(Backend& b, const cases::Case& c, const TensorMap& inputs, TensorMap outputs,
             const InputCopy* inputs_copy = nullptr) {
  Run r{std::move(outputs), ""};
  if (const Support s = backend_supports(b, c); !s.ok) {
    r.error = s.reason;
    r.declined = true;
    return r;
  }
  try {
    const Status st = execute(b, c, inputs, r.outputs, inputs_copy);
    if (!st.ok()) {
      r.error = st.message();
      r.declined = st.code() == StatusCode::kUnsupported;
    }
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

Run run_once(Backend& b, const cases::Case& c, const TensorMap& inputs,
             const std::vector<OutputSpec>& specs) {
  return run_once(b, c, inputs, allocate_outputs(specs));
}

// A probe call ready to run: the case variation, its inputs and its outputs (allocated, poisoned),
// and for a backend that checks its inputs, their copy (input_check.h).
struct Setup {
  cases::Case c;
  TensorMap inputs;
  TensorMap outputs;
  std::shared_ptr<const InputCopy> inputs_copy = nullptr;
};

Setup make_setup(cases::Case c, TensorMap inputs, const std::vector<OutputSpec>& specs) {
  TensorMap outputs = allocate_outputs(specs);
  return {std::move(c), std::move(inputs), std::move(outputs)};
}

Setup make_setup(Repacked rp) {
  const std::vector<OutputSpec> specs = operation_for(rp.c).outputs(rp.c);
  return make_setup(std::move(rp.c), std::move(rp.tensors), specs);
}

// The probes' calls whose inputs do not depend on an earlier call, in the order they are made.
// With `ahead` (RunOptions::prepare_ahead) call k + 1's setup is built on another thread while
// the backend runs call k: only the building moves, so the backend sees the same calls in the
// same order, and a probe that stops early leaves the rest of its calls unbuilt (at most the
// next one built for nothing). Builds run one at a time, in order.
class Setups {
 public:
  // `copy_inputs`: each setup with inputs also gets their copy (built with it, ahead or not).
  Setups(bool ahead, bool copy_inputs) : ahead_(ahead), copy_inputs_(copy_inputs) {}
  Setups(const Setups&) = delete;
  Setups& operator=(const Setups&) = delete;
  ~Setups() {
    if (pending_.valid()) pending_.wait();
  }

  // Builds the first call's setup ahead (the calls before it do not come from here).
  void start() {
    if (ahead_ && !builds_.empty() && !pending_.valid()) launch(0);
  }

  size_t add(std::function<Setup()> build) {
    builds_.push_back(std::move(build));
    return builds_.size() - 1;
  }

  // Call k's setup (the one built ahead, or built now); starts building call k + 1.
  Setup take(size_t k) {
    std::optional<Setup> s;
    if (pending_.valid()) {
      if (pending_index_ == k)
        s = pending_.get();
      else
        pending_.wait();  // built for a call the probe did not make
      pending_ = {};
    }
    if (!s) s = build(k);
    if (ahead_ && k + 1 < builds_.size()) launch(k + 1);
    return std::move(*s);
  }

 private:
  Setup build(size_t k) const {
    Setup s = builds_.at(k)();
    if (copy_inputs_ && !s.inputs.all().empty())
      s.inputs_copy = std::make_shared<const InputCopy>(s.inputs);
    return s;
  }

  void launch(size_t k) {
    try {
      pending_ = std::async(std::launch::async, [this, k] { return build(k); });
      pending_index_ = k;
    } catch (const std::system_error&) {  // no thread to be had: built when its turn comes
    }
  }

  bool ahead_, copy_inputs_;
  std::vector<std::function<Setup()>> builds_;
  std::future<Setup> pending_;
  size_t pending_index_ = 0;
};

ProbeReport report(const std::string& name, Verdict v, std::string detail = "") {
  return {name, v, std::move(detail)};
}

// A failed probe run: skipped with the backend's reason when it declined the variation.
ProbeReport run_failed(const std::string& name, const Run& r) {
  if (r.declined) return report(name, Verdict::kSkipped, "the backend declined it: " + r.error);
  return report(name, Verdict::kError, r.error);
}

// How two results of the same backend are compared: bit for bit, or within the per-sequence
// tolerance of the plain run.
struct Comparison {
  bool exact;
  const CaseResult* judged;

  // The tolerance of sequence `seq` in output `name`, or nullptr (compared bit for bit).
  const Threshold* tolerance(const std::string& name, int64_t seq) const {
    for (const TensorReport& t : judged->tensors)
      if (t.name == name && !t.exact && seq < static_cast<int64_t>(t.seqs.size()))
        return &t.seqs[seq].threshold;
    return nullptr;
  }
};

// The flat element range of sequence `seq` of a token-major or sequence-major tensor of a case
// with layout L and `total` token rows (ops::token_rows: a padding tail included).
std::pair<int64_t, int64_t> sequence_range(const cases::Tensor& t, TensorMajor m, const Layout& L,
                                           int64_t total, int64_t seq) {
  if (m == TensorMajor::kToken) {
    const int64_t per = total > 0 ? t.numel() / total : 0;
    const int64_t first = token_row(L, seq, 0);
    return {first * per, (first + L.lengths[seq]) * per};
  }
  const int64_t per = t.numel() / std::max<int64_t>(1, L.num_seqs());
  return {seq * per, (seq + 1) * per};
}

// Whether sequence `seq_a` of run `a` (case ca) and sequence `seq_b` of run `b` (case cb) agree:
// "" when they do, else what moved, where and by how much. `seq` indexes the plain run's
// thresholds.
std::string compare_sequence(const Operation& op, const Comparison& cmp, int64_t seq,
                             const cases::Case& ca, const TensorMap& a, int64_t seq_a,
                             const cases::Case& cb, const TensorMap& b, int64_t seq_b) {
  const Layout &la = ca.layout(), &lb = cb.layout();
  const int64_t rows_a = token_rows(ca), rows_b = token_rows(cb);
  for (const cases::Tensor& ta : a.all()) {
    const cases::Tensor* tb = b.find(ta.name());
    if (!tb) return fmt::format("output '{}' missing", ta.name());
    const TensorMajor m = op.major(ta.name());
    if (m == TensorMajor::kNone) continue;
    const auto [a0, a1] = sequence_range(ta, m, la, rows_a, seq_a);
    const auto [b0, b1] = sequence_range(*tb, m, lb, rows_b, seq_b);
    if (a1 - a0 != b1 - b0) return fmt::format("seq {} has another size in '{}'", seq, ta.name());
    const int64_t n = a1 - a0;
    const size_t es = static_cast<size_t>(cases::dtype_size(ta.dtype()));
    const bool same_bits =
        ta.dtype() == tb->dtype() &&
        std::memcmp(static_cast<const uint8_t*>(ta.data()) + a0 * es,
                    static_cast<const uint8_t*>(tb->data()) + b0 * es, n * es) == 0;
    if (same_bits) continue;
    // How far it moved: max |Δ| (and where), relative RMS against the plain run's values.
    double max_abs = 0.0, num = 0.0, den = 0.0;
    int64_t at = -1, non_finite = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double x = ta.get(a0 + i), y = tb->get(b0 + i);
      if (std::isfinite(x) != std::isfinite(y) || std::isnan(x) != std::isnan(y)) ++non_finite;
      const double d = std::fabs(x - y);
      if (!(d <= max_abs) && std::isfinite(d)) max_abs = d, at = i;
      if (at < 0 && x != y) at = i;
      if (std::isfinite(d)) num += d * d;
      den += x * x;
    }
    const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    const Threshold* tol = cmp.exact ? nullptr : cmp.tolerance(ta.name(), seq);
    if (tol && within(*tol, rel, max_abs, non_finite)) continue;
    const int64_t per_token =
        m == TensorMajor::kToken && la.lengths[seq_a] > 0 ? n / la.lengths[seq_a] : 0;
    const std::string where =
        per_token > 0 && at >= 0 ? fmt::format(" from token {}", at / per_token) : "";
    const std::string how = tol ? fmt::format("beyond its tolerance rel_rms {:.1e} / max|Δ| {:.1e}",
                                              tol->rel_rms, tol->max_abs)
                                : "compared bit for bit: the backend repeats bit-identically";
    return fmt::format("seq {} moved in '{}'{}: max|Δ| {:.2e}, rel_rms {:.1e}{} ({})", seq,
                       ta.name(), where, max_abs, rel,
                       non_finite > 0 ? fmt::format(", {} non-finite", non_finite) : "", how);
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

// The first tensor of `a` whose bytes differ from b's tensor of the same name (or that b lacks);
// nullptr when all of them are bit-identical.
const cases::Tensor* first_difference(const TensorMap& a, const TensorMap& b) {
  for (const cases::Tensor& t : a.all()) {
    const cases::Tensor* other = b.find(t.name());
    if (!other || other->nbytes() != t.nbytes() ||
        std::memcmp(t.data(), other->data(), t.nbytes()) != 0)
      return &t;
  }
  return nullptr;
}

// The same case twice. Returns the report and whether the two runs were bit-identical.
std::pair<ProbeReport, bool> probe_repeat(const PreparedCase& pc, Backend& b,
                                          const TensorMap& outputs, const CaseResult& judged,
                                          size_t call, Setups& setups) {
  Setup su = setups.take(call);  // outputs only: the case's own inputs again
  const Run again = run_once(b, pc.c, pc.inputs, std::move(su.outputs), pc.inputs_copy.get());
  if (!again.error.empty()) return {run_failed("repeat", again), false};
  const cases::Tensor* differs = first_difference(outputs, again.outputs);
  if (!differs) return {report("repeat", Verdict::kPass), true};
  if (b.deterministic())
    return {report("repeat", Verdict::kFail,
                   fmt::format("two runs of the same case differ in '{}', but the backend "
                               "declares itself deterministic",
                               differs->name())),
            false};
  // Not declared deterministic: the two runs must agree within every sequence's tolerance.
  const Operation& op = operation_for(pc.c);
  const Comparison tolerant{false, &judged};
  const Layout& L = pc.c.layout();
  for (int64_t s = 0; s < L.num_seqs(); ++s) {
    const std::string d =
        compare_sequence(op, tolerant, s, pc.c, outputs, s, pc.c, again.outputs, s);
    if (!d.empty())
      return {report("repeat", Verdict::kFail, "two runs of the same case differ: " + d), false};
  }
  return {report("repeat", Verdict::kPass,
                 fmt::format("not bit-reproducible ('{}' differs within tolerance): the other "
                             "probes compare with tolerance",
                             differs->name())),
          false};
}

// The inputs of a case whose sequences s with regenerated[s] come from `salted` (the case's
// inputs with every sequence regenerated) and the others from `base`. Inputs depend only on their
// own sequence's salt (cases/generate.h), so this has the bits of generating with just those
// sequences salted; nullopt where a tensor that belongs to no sequence differs between the two.
std::optional<TensorMap> mix_sequences(const Operation& op, const cases::Case& c,
                                       const TensorMap& base, const TensorMap& salted,
                                       const std::vector<bool>& regenerated) {
  if (base.all().size() != salted.all().size()) return std::nullopt;
  const Layout& L = c.layout();
  const int64_t rows = token_rows(c);
  TensorMap out;
  for (const cases::Tensor& t : base.all()) {
    const cases::Tensor* from = salted.find(t.name());
    if (!from || from->dtype() != t.dtype() || from->shape() != t.shape()) return std::nullopt;
    const TensorMajor m = op.major(t.name());
    if (m == TensorMajor::kNone) {
      if (std::memcmp(t.data(), from->data(), t.nbytes()) != 0) return std::nullopt;
      out.add(t);
      continue;
    }
    cases::Tensor& mixed = out.add(t);
    const size_t es = static_cast<size_t>(cases::dtype_size(t.dtype()));
    for (int64_t s = 0; s < L.num_seqs(); ++s) {
      if (!regenerated[s]) continue;
      const auto [b, e] = sequence_range(t, m, L, rows, s);
      std::memcpy(static_cast<uint8_t*>(mixed.data()) + b * es,
                  static_cast<const uint8_t*>(from->data()) + b * es, (e - b) * es);
    }
  }
  return out;
}

// The isolation probe's two calls: alternate sequences regenerated (the others must not move),
// then the others. An empty sequence carries nothing between its neighbours unless states flow,
// so alternation skips it then; with states its (regenerated) initial state is information too.
struct Isolation {
  std::vector<int> group;  // per sequence: the call (0, 1) whose inputs keep it; -1 neither
  size_t first_call = 0;   // in Setups
};

Isolation plan_isolation(const PreparedCase& pc, Setups& setups) {
  const Operation& op = operation_for(pc.c);
  const Layout& L = pc.c.layout();
  const int64_t n = L.num_seqs();
  const bool states = !op.carried_states(pc.c).empty();
  Isolation iso;
  iso.group.assign(static_cast<size_t>(n), -1);
  for (int64_t s = 0, k = 0; s < n; ++s)
    if (states || L.lengths[s] > 0) iso.group[s] = static_cast<int>(k++ % 2);
  auto salts = [group = iso.group](int parity) {
    cases::GenOptions g;
    for (int64_t s = 0; s < static_cast<int64_t>(group.size()); ++s)
      if (group[s] != parity) g.sequence_salt[s] = 0x5eed + static_cast<uint64_t>(s);
    return g;
  };
  auto generate = [&pc](const cases::GenOptions& g) {
    auto compute = [&] { return cases::generate_inputs(pc.c, g); };
    return pc.cache ? pc.cache->inputs(pc.c, g, compute) : compute();
  };
  // Every sequence regenerated once (by the first build; builds run in order); each parity's
  // inputs are cut from these and the case's own.
  auto all_salted = std::make_shared<std::optional<TensorMap>>();
  for (int parity = 0; parity < 2; ++parity) {
    const size_t k = setups.add([&pc, &op, parity, salts, generate, all_salted, group = iso.group] {
      if (!*all_salted) *all_salted = generate(salts(-2));
      std::vector<bool> regenerated(group.size());
      for (size_t s = 0; s < group.size(); ++s) regenerated[s] = group[s] != parity;
      std::optional<TensorMap> mixed =
          mix_sequences(op, pc.c, pc.inputs, **all_salted, regenerated);
      return make_setup(pc.c, mixed ? std::move(*mixed) : generate(salts(parity)), pc.outputs);
    });
    if (parity == 0) iso.first_call = k;
  }
  return iso;
}

ProbeReport probe_isolation(const PreparedCase& pc, Backend& b, const TensorMap& outputs,
                            const Comparison& cmp, const Isolation& iso, Setups& setups) {
  const Operation& op = operation_for(pc.c);
  const int64_t n = pc.c.layout().num_seqs();
  for (int parity = 0; parity < 2; ++parity) {
    Setup su = setups.take(iso.first_call + static_cast<size_t>(parity));
    const Run r = run_once(b, su.c, su.inputs, std::move(su.outputs), su.inputs_copy.get());
    if (!r.error.empty()) return run_failed("isolation", r);
    for (int64_t s = 0; s < n; ++s) {
      if (iso.group[s] != parity) continue;
      const std::string d = compare_sequence(op, cmp, s, pc.c, outputs, s, pc.c, r.outputs, s);
      if (!d.empty())
        return report("isolation", Verdict::kLeak, d + " when only its neighbours' inputs changed");
    }
  }
  return report("isolation", Verdict::kPass);
}

// The alone probe's calls: each sampled sequence by itself. Returns the first's index in Setups.
size_t plan_alone(const PreparedCase& pc, Setups& setups) {
  const Layout& L = pc.c.layout();
  size_t first = 0;
  bool any = false;
  for (int64_t s : sample_sequences(L.num_seqs())) {
    const size_t k = setups.add([&pc, s] {
      return make_setup(repack(pc.c, pc.inputs, {{s, 0, pc.c.layout().lengths[s]}}));
    });
    if (!any) first = k, any = true;
  }
  return first;
}

ProbeReport probe_alone(const PreparedCase& pc, Backend& b, const TensorMap& outputs,
                        const Comparison& cmp, size_t first_call, Setups& setups) {
  const Operation& op = operation_for(pc.c);
  size_t k = first_call;
  for (int64_t s : sample_sequences(pc.c.layout().num_seqs())) {
    Setup su = setups.take(k++);
    const Run r = run_once(b, su.c, su.inputs, std::move(su.outputs), su.inputs_copy.get());
    if (!r.error.empty()) return run_failed("alone", r);
    const std::string d = compare_sequence(op, cmp, s, pc.c, outputs, s, su.c, r.outputs, 0);
    if (d.empty()) continue;
    // Different alone: a leak when the lone run is the right one (the pack's moved with its
    // neighbours). Wrong against the oracle by itself, it is the backend's lone call that is
    // wrong (a one-token call, a batch of one), not a dependence on another sequence: fail.
    const CaseResult lone =
        judge(prepare_pieces(pc, {{s, 0, pc.c.layout().lengths[s]}}), r.outputs, b.name(), true);
    if (lone.verdict == Verdict::kFail)
      return report("alone", Verdict::kFail,
                    fmt::format("seq {} is right in the pack and wrong alone (its own call), not "
                                "a leak: {}",
                                s, lone.message));
    return report("alone", Verdict::kLeak, d + " between the pack and alone");
  }
  return report("alone", Verdict::kPass);
}

// The order probe's call: the pack reversed. Returns its index in Setups.
size_t plan_order(const PreparedCase& pc, Setups& setups) {
  return setups.add([&pc] {
    const Layout& L = pc.c.layout();
    std::vector<Piece> reversed;
    for (int64_t s = L.num_seqs() - 1; s >= 0; --s) reversed.push_back({s, 0, L.lengths[s]});
    return make_setup(repack(pc.c, pc.inputs, reversed));
  });
}

ProbeReport probe_order(const PreparedCase& pc, Backend& b, const TensorMap& outputs,
                        const Comparison& cmp, size_t call, Setups& setups) {
  const Operation& op = operation_for(pc.c);
  const int64_t n = pc.c.layout().num_seqs();
  Setup su = setups.take(call);
  const Run r = run_once(b, su.c, su.inputs, std::move(su.outputs), su.inputs_copy.get());
  if (!r.error.empty()) return run_failed("order", r);
  for (int64_t s = 0; s < n; ++s) {
    const std::string d =
        compare_sequence(op, cmp, s, pc.c, outputs, s, su.c, r.outputs, n - 1 - s);
    if (!d.empty()) return report("order", Verdict::kLeak, d + " when the pack is reversed");
  }
  return report("order", Verdict::kPass);
}

// The second call's inputs: `r2` with the states the first call left in `carried_from` (output
// name -> tensor of the first call's outputs).
void carry_states(const Operation& op, const cases::Case& c, Repacked& r2,
                  const std::function<cases::Tensor(const std::string& out)>& carried_from) {
  for (const auto& [out, in] : op.carried_states(c)) {
    cases::Tensor carried = carried_from(out);
    cases::Tensor state(in, carried.dtype(), carried.shape());
    std::memcpy(state.data(), carried.data(), carried.nbytes());
    if (cases::Tensor* t = r2.tensors.find(in))
      *t = std::move(state);
    else
      r2.tensors.add(std::move(state));
  }
}

// The values of two calls (first pieces, then second pieces of every sequence) in the original
// layout: token rows of both calls, the sequence rows (states) of the second.
Values reassemble(const Operation& op, const Layout& L, const std::vector<Piece>& first,
                  const std::vector<Piece>& second, const Values& v1, const Values& v2,
                  const Values& shape_of) {
  Values out;
  const int64_t total = L.total_tokens(), n = L.num_seqs();
  for (const auto& [name, like] : shape_of) {
    std::vector<double>& dst = out[name];
    dst.assign(like.size(), 0.0);
    const TensorMajor m = op.major(name);
    const std::vector<double>& a = v1.at(name);
    const std::vector<double>& b = v2.at(name);
    if (m == TensorMajor::kToken) {
      const size_t row = total > 0 ? like.size() / static_cast<size_t>(total) : 0;
      int64_t off1 = 0, off2 = 0;
      for (int64_t s = 0; s < n; ++s) {
        double* at = dst.data() + token_row(L, s, 0) * row;
        std::copy(a.begin() + off1 * row, a.begin() + (off1 + first[s].length) * row, at);
        std::copy(b.begin() + off2 * row, b.begin() + (off2 + second[s].length) * row,
                  at + first[s].length * row);
        off1 += first[s].length;
        off2 += second[s].length;
      }
    } else {
      dst = b;
    }
  }
  return out;
}

// The split probe's pieces: each sequence cut mid-chunk, its first part in the first call.
std::pair<std::vector<Piece>, std::vector<Piece>> split_pieces(const Layout& L) {
  std::vector<Piece> first, second;
  for (int64_t s = 0; s < L.num_seqs(); ++s) {
    const int64_t len = L.lengths[s];
    const int64_t cut = len <= 1 ? len : std::max<int64_t>(1, (len / 2) | 1);
    first.push_back({s, 0, cut});
    second.push_back({s, cut, len - cut});
  }
  return {first, second};
}

// The split probe's first call (the second's inputs depend on it). Returns its index in Setups.
size_t plan_split(const PreparedCase& pc, Setups& setups) {
  return setups.add(
      [&pc] { return make_setup(repack(pc.c, pc.inputs, split_pieces(pc.c.layout()).first)); });
}

// Each sequence in two calls, cut mid-chunk; the second call starts from the first's states.
ProbeReport probe_split(const PreparedCase& pc, Backend& b, const TensorMap& outputs,
                        const CaseResult& judged, size_t first_call, Setups& setups) {
  const Operation& op = operation_for(pc.c);
  const Layout& L = pc.c.layout();
  const std::pair<std::vector<Piece>, std::vector<Piece>> pieces = split_pieces(L);
  const std::vector<Piece>& first = pieces.first;
  const std::vector<Piece>& second = pieces.second;
  Setup r1 = setups.take(first_call);
  const Run a = run_once(b, r1.c, r1.inputs, std::move(r1.outputs), r1.inputs_copy.get());
  if (!a.error.empty()) return run_failed("split", a);
  Repacked r2 = repack(pc.c, pc.inputs, second);
  carry_states(op, pc.c, r2, [&](const std::string& out) { return a.outputs.at(out); });
  const Run c2 = run_once(b, r2.c, r2.tensors, op.outputs(r2.c));
  if (!c2.error.empty()) return run_failed("split", c2);
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
  // Two calls that give exactly the one-shot run's bits: the oracle cannot tell them apart, so the
  // case's own judgement stands for both (a recurrent kernel, which computes each token the same
  // way however its sequence is cut); neither the split's tolerance nor its comparison is needed.
  if (!first_difference(whole, outputs))
    return report("split", Verdict::kPass, "bit-identical to the one-shot run");
  // The tolerance of a split: the baselines run split the same way (a chunked baseline restarts
  // its chunk grid at the cut too), each carrying its own states.
  PreparedCase split{pc.c, {}, pc.expected, {}, pc.outputs};
  split.precision = pc.precision;
  const std::vector<OutputSpec> specs1 = op.outputs(r1.c);
  auto tolerance = [&] {
    const std::vector<Baseline> b1 = op.baselines(r1.c, r1.inputs, pc.precision);
    for (size_t i = 0; i < b1.size(); ++i) {
      Repacked r2b = repack(pc.c, pc.inputs, second);
      carry_states(op, pc.c, r2b, [&](const std::string& out) {
        for (const OutputSpec& spec : specs1)
          if (spec.name == out) {
            cases::Tensor t(out, spec.dtype, spec.shape);
            const std::vector<double>& v = b1[i].values.at(out);
            for (int64_t e = 0; e < t.numel(); ++e) t.set(e, v[e]);
            return t;
          }
        throw std::logic_error("carried state '" + out + "' is not an output");
      });
      const Baseline b2 = op.baseline(r2b.c, r2b.tensors, pc.precision, i);
      split.baselines.push_back(
          {b1[i].name, reassemble(op, L, first, second, b1[i].values, b2.values, pc.expected)});
    }
    measure_baselines(split);
    return split.baseline_errors;
  };
  // The split's tolerance depends on the case alone (a cached case has its generated inputs) and
  // the precision: the cache keeps it under those.
  split.baseline_errors =
      pc.cache ? pc.cache->errors("split", pc.c, pc.precision, tolerance) : tolerance();
  const CaseResult j = judge(split, whole, b.name(), true);
  if (j.verdict == Verdict::kPass) return report("split", Verdict::kPass);
  // Off the oracle: a failure only if it is also off the one-shot result by more than the
  // tolerance (a one-shot run that is itself off the oracle is judged by the oracle comparison).
  const Comparison tolerant{false, &judged};
  for (int64_t s = 0; s < n; ++s) {
    const std::string d = compare_sequence(op, tolerant, s, pc.c, outputs, s, pc.c, whole, s);
    if (!d.empty())
      return report("split", Verdict::kFail,
                    "two calls with carried state differ from one: " + j.message + "; " + d);
  }
  return report("split", Verdict::kPass,
                "off the oracle like the one-shot run, within tolerance of it: " + j.message);
}

}  // namespace

// The probes' calls, planned from the case alone (which probes apply, their variations of it).
struct ProbePlan::Impl {
  Impl(bool ahead, bool copy_inputs) : setups(ahead, copy_inputs) {}
  bool repackable = false, packed = false, split = false;
  Setups setups;
  Isolation isolation;
  size_t repeat = 0, alone = 0, order = 0, split_call = 0;
};

// The probe calls' inputs are copied with their setups when the case's own are (a backend of the
// run checks its inputs).
ProbePlan::ProbePlan(const PreparedCase& pc, bool ahead)
    : impl_(std::make_unique<Impl>(ahead, pc.inputs_copy != nullptr)) {
  Impl& p = *impl_;
  const Operation& op = operation_for(pc.c);
  p.repackable = op.repackable(pc.c);
  if (!p.repackable) return;
  const Layout& L = pc.c.layout();
  p.packed = L.num_seqs() >= 2;
  int64_t longest = 0;
  for (int64_t l : L.lengths) longest = std::max(longest, l);
  // The split reassembles the sequences' tokens of two calls; a padding tail (which no op with
  // carried states has) would stay unwritten in it.
  p.split = !op.carried_states(pc.c).empty() && longest >= 2 && op.tail_rows(pc.c) == 0;
  // Every call's setup but the split's second (it starts from the first's states), in the order
  // the calls are made; the repeat's is only its outputs.
  p.repeat = p.setups.add([&pc] { return make_setup(pc.c, {}, pc.outputs); });
  if (p.packed) {
    p.isolation = plan_isolation(pc, p.setups);
    p.alone = plan_alone(pc, p.setups);
    p.order = plan_order(pc, p.setups);
  }
  if (p.split) p.split_call = plan_split(pc, p.setups);
  p.setups.start();  // the first is built while the case's own call runs
}

ProbePlan::~ProbePlan() = default;

std::vector<ProbeReport> run_probes(const PreparedCase& pc, Backend& b, const TensorMap& outputs,
                                    const CaseResult& judged, bool ahead) {
  ProbePlan plan(pc, ahead);
  return run_probes(pc, b, outputs, judged, plan);
}

std::vector<ProbeReport> run_probes(const PreparedCase& pc, Backend& b, const TensorMap& outputs,
                                    const CaseResult& judged, ProbePlan& plan) {
  ProbePlan::Impl& p = *plan.impl_;
  std::vector<ProbeReport> out;
  if (!p.repackable) return out;
  auto [repeat, identical] = probe_repeat(pc, b, outputs, judged, p.repeat, p.setups);
  out.push_back(std::move(repeat));
  const Comparison cmp{identical && b.batch_invariant(pc.c), &judged};
  if (p.packed) {
    out.push_back(probe_isolation(pc, b, outputs, cmp, p.isolation, p.setups));
    out.push_back(probe_alone(pc, b, outputs, cmp, p.alone, p.setups));
    out.push_back(probe_order(pc, b, outputs, cmp, p.order, p.setups));
  }
  if (p.split) out.push_back(probe_split(pc, b, outputs, judged, p.split_call, p.setups));
  return out;
}

}  // namespace deltacheck::harness
