// Multi-call cache modes.
#include "harness/call_plan.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "cases/rng.h"
#include "harness/op_names.h"
#include "harness/runner.h"

namespace deltacheck::harness {
namespace {

// Cut points of one sequence into `pieces` parts: generated from the seed, with a bias towards
// the places bugs live (mid-chunk, right after a chunk edge, single tokens).
std::vector<int64_t> cuts_of(const cases::Case& c, int64_t seq, int64_t len, int64_t pieces) {
  // Keyed by length, not position, so a sequence is cut the same way alone or in any order.
  const cases::Stream st(c.seed(), "chunk_cuts/" + std::to_string(len));
  std::vector<int64_t> cuts;
  for (int64_t i = 0; i + 1 < pieces; ++i) {
    const double u = st.uniform(static_cast<uint64_t>(i));
    int64_t at;
    if (i % 3 == 1 && len > 0)
      at = std::min(len, cuts.empty() ? int64_t{1} : cuts.back() + 1);  // a length-1 piece
    else if (i % 3 == 2)
      at = std::min(len, int64_t{65});  // just past a chunk edge
    else
      at = static_cast<int64_t>(u * static_cast<double>(len + 1));  // anywhere, mid-chunk mostly
    cuts.push_back(at);
  }
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

}  // namespace

Support backend_supports(const Backend& backend, const cases::Case& c) {
  const Operation& op = operation_for(c);
  if (op.call_mode(c).kind != CallMode::Kind::kDriven) return backend.supports(c);
  for (const auto& [kind, call] : op.driven_calls(c))
    if (const Support s = backend.supports(call); !s.ok)
      return Support::No(call.has("cache")
                             ? "the scenario's " + kind + " calls (" + call.get("cache") +
                                   "): " + s.reason
                             : "its " + kind + " call (" + call.id() + "): " + s.reason);
  return Support::Yes();
}

bool one_call(const cases::Case& c) {
  return operation_for(c).call_mode(c).kind == CallMode::Kind::kOne;
}

std::vector<Call> call_plan(const cases::Case& c) {
  const CallMode mode = operation_for(c).call_mode(c);
  if (mode.kind == CallMode::Kind::kOne || mode.kind == CallMode::Kind::kDriven) return {};
  const cases::Layout& L = c.layout();
  const int64_t n = L.num_seqs(), calls = mode.count;
  std::vector<Call> plan;
  if (mode.kind == CallMode::Kind::kChunked) {
    plan.assign(static_cast<size_t>(calls), Call{"prefill", {}});
    for (int64_t s = 0; s < n; ++s) {
      const std::vector<int64_t> cuts = cuts_of(c, s, L.lengths[s], calls);
      int64_t begin = 0;
      for (int64_t i = 0; i < calls; ++i) {
        const int64_t end = i + 1 < calls ? cuts[i] : L.lengths[s];
        plan[i].pieces.push_back({s, begin, end - begin});
        begin = end;
      }
    }
    return plan;
  }
  // dynamic: prefill, then `calls` one-token decode steps per sequence (as many as it has).
  Call prefill{"prefill", {}};
  std::vector<int64_t> pre(static_cast<size_t>(n));
  for (int64_t s = 0; s < n; ++s) {
    pre[s] = std::max<int64_t>(0, L.lengths[s] - calls);
    prefill.pieces.push_back({s, 0, pre[s]});
  }
  plan.push_back(prefill);
  for (int64_t step = 0; step < calls; ++step) {
    Call decode{"decode", {}};
    for (int64_t s = 0; s < n; ++s)
      if (pre[s] + step < L.lengths[s]) decode.pieces.push_back({s, pre[s] + step, 1});
    if (!decode.pieces.empty()) plan.push_back(decode);
  }
  return plan;
}

namespace {

// One call of a backend; for a backend that checks_inputs(), its inputs compared after the call
// with `before` (a copy taken ahead) or with a copy taken now.
template <typename Fn>
Status checked_call(const Backend& backend, const cases::TensorMap& inputs, const InputCopy* before,
                    const Fn& call) {
  if (!backend.checks_inputs()) return call();
  std::optional<InputCopy> own;
  if (!before) before = &own.emplace(inputs);
  const Status st = call();
  if (!st.ok()) return st;
  if (std::string why = before->changed(inputs); !why.empty())
    return Status::Internal("the backend " + why);
  return st;
}

// A driven case: the operation makes the calls; each call's outputs are allocated poisoned and
// must come back complete and inside their bounds.
Status drive(Backend& backend, const cases::Case& c, const cases::TensorMap& inputs,
             cases::TensorMap& outputs) {
  DriveMemory memory;
  const ops::RunCall run = [&](const ops::DrivenCall& call, const cases::Case& cc,
                               const cases::TensorMap& in) -> StatusOr<cases::TensorMap> {
    const std::vector<OutputSpec> specs = operation_for(cc).outputs(cc);
    cases::TensorMap out = allocate_outputs(specs);
    if (Status st = checked_call(backend, in, nullptr,
                                 [&] { return backend.run_driven(call, memory, cc, in, out); });
        !st.ok())
      return st;
    for (const OutputSpec& spec : specs) {
      const cases::Tensor& t = out.at(spec.name);
      int64_t first = -1;
      if (t.count_poisoned(&first) > 0 && spec.name != "state_pool")
        return Status::Internal(spec.name + " element " + std::to_string(first) +
                                " left unwritten");
    }
    return out;
  };
  return operation_for(c).drive(c, inputs, outputs, run);
}

}  // namespace

Status execute(Backend& backend, const cases::Case& c, const cases::TensorMap& inputs,
               cases::TensorMap& outputs, const InputCopy* inputs_copy) {
  if (operation_for(c).call_mode(c).kind == CallMode::Kind::kDriven)
    return drive(backend, c, inputs, outputs);
  const std::vector<Call> plan = call_plan(c);
  if (plan.empty())
    return checked_call(backend, inputs, inputs_copy,
                        [&] { return backend.run(c, inputs, outputs); });
  const Operation& op = operation_for(c);
  const cases::Layout& L = c.layout();
  // The state table: each sequence's current state(s), starting from the case's initial ones.
  cases::TensorMap state_inputs = inputs;
  const auto carried = op.carried_states(c);
  for (const auto& [out_name, in_name] : carried)
    if (!state_inputs.has(in_name)) {
      const cases::Tensor& like = outputs.at(out_name);
      cases::Tensor zero(in_name, like.dtype(), like.shape());
      std::memset(zero.data(), 0, zero.nbytes());
      state_inputs.add(std::move(zero));
    }
  for (const Call& call : plan) {
    Repacked rp = repack(c, state_inputs, call.pieces, {{"cache", call.cache}});
    cases::TensorMap out = allocate_outputs(op.outputs(rp.c));
    if (Status st = checked_call(backend, rp.tensors, nullptr,
                                 [&] { return backend.run(rp.c, rp.tensors, out); });
        !st.ok())
      return st;
    // Token outputs go to their place in the whole case; states back into the table.
    int64_t row = 0;
    for (const Piece& p : call.pieces) {
      for (cases::Tensor& t : outputs.all()) {
        const TensorMajor m = op.major(t.name());
        if (m != TensorMajor::kToken) continue;
        const cases::Tensor& part = out.at(t.name());
        const int64_t total = L.total_tokens(), part_total = std::max<int64_t>(1, [&] {
                                                  int64_t s = 0;
                                                  for (const Piece& q : call.pieces) s += q.length;
                                                  return s;
                                                }());
        const auto bytes = row_bytes(part, m, part_total, row, p.length);
        const size_t row_size = total > 0 ? t.nbytes() / static_cast<size_t>(total) : 0;
        if (!bytes.empty())
          std::memcpy(static_cast<uint8_t*>(t.data()) + token_row(L, p.seq, p.offset) * row_size,
                      bytes.data(), bytes.size());
      }
      row += p.length;
    }
    for (const auto& [out_name, in_name] : carried) {
      const cases::Tensor& part = out.at(out_name);
      cases::Tensor& table = state_inputs.at(in_name);
      const size_t per = table.nbytes() / static_cast<size_t>(L.num_seqs());
      for (size_t i = 0; i < call.pieces.size(); ++i)
        std::memcpy(static_cast<uint8_t*>(table.data()) + call.pieces[i].seq * per,
                    static_cast<const uint8_t*>(part.data()) + i * per, per);
    }
  }
  for (const auto& [out_name, in_name] : carried)
    std::memcpy(outputs.at(out_name).data(), state_inputs.at(in_name).data(),
                outputs.at(out_name).nbytes());
  return Status::Ok();
}

}  // namespace deltacheck::harness
