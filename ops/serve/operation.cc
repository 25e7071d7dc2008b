// The serve operation: outputs o [sum of request lengths, HV, V] (each request's accepted tokens,
// request after request) and final_state [requests, HV, K, V] (each request's state when it
// left). The expectation is every request's own one-shot FP64 run from a zero state (all
// requests packed into one reference call, cu_seqlens between them); the baselines are the same
// one-shot runs in the formulations in real use. drive() plays the runtime (scenario.h): each
// call's states come from the backend's own earlier outputs: the lanes, and the block
// checkpoints a prefix hit resumes from.
#include "ops/operation.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <utility>

#include "cases/rng.h"
#include "fmt/format.h"
#include "ops/gdr/params.h"
#include "ops/gdr/serving.h"
#include "ops/serve/params.h"
#include "ops/serve/scenario.h"
#include "reference/gated_delta_rule.h"

namespace deltacheck::ops::serve {
namespace {

using cases::DType;
using cases::Tensor;
using cases::TensorMap;
using State = std::vector<float>;
using Reference =
    std::function<reference::GatedDeltaRuleResult(const reference::GatedDeltaRuleArgs&)>;

// Every request's one-shot run, packed: o request after request, then the final states.
Values one_shot(const cases::Case& c, const TensorMap& in, const Reference& rule) {
  const Params p = decode(c);
  const Scenario sc = expand(p);
  std::vector<int64_t> order;  // token pool ids in output row order
  reference::GatedDeltaRuleArgs a;
  a.cu_seqlens.push_back(0);
  for (const Request& q : sc.requests) {
    order.insert(order.end(), q.tokens.begin(), q.tokens.end());
    a.cu_seqlens.push_back(static_cast<int64_t>(order.size()));
  }
  const int64_t n = static_cast<int64_t>(order.size());
  auto gather = [&](const char* name, int64_t per) {
    const Tensor& t = in.at(name);
    std::vector<double> out(static_cast<size_t>(n * per));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < per; ++j) out[i * per + j] = t.get(order[i] * per + j);
    return out;
  };
  const std::vector<double> q = gather("q", p.H * p.K), k = gather("k", p.H * p.K),
                            v = gather("v", p.HV * p.V), g = gather("g", p.HV),
                            beta = gather("beta", p.HV);
  a.batch = 1;
  a.seq_len = n;
  a.num_heads = p.H;
  a.num_value_heads = p.HV;
  a.key_dim = p.K;
  a.value_dim = p.V;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.g = g.data();
  a.beta = beta.data();
  a.use_qk_l2norm = true;
  reference::GatedDeltaRuleResult r = rule(a);
  return {{"o", std::move(r.output)}, {"final_state", std::move(r.final_state)}};
}

std::string packed_layout(const std::vector<int64_t>& lengths) {
  std::string s = "packed[";
  for (size_t i = 0; i < lengths.size(); ++i) s += (i ? "," : "") + std::to_string(lengths[i]);
  return s + "]";
}

// The gdr case of one call: a prefill of the rows' pieces from initial states, or a verify
// (cache=spec: a state per fed token, in a slot-addressed pool). contract=accept: the verify is
// cache=accept; contract=serving: the prefill too is cache=ckpt (block size in `calls`).
cases::Case call_case(const Params& p, const ScenarioCall& call) {
  const bool verify = call.info.kind == "verify";
  std::vector<int64_t> lengths;
  for (const DrivenRow& row : call.info.rows) lengths.push_back(row.tokens);
  const int64_t fed = 1 + p.spec;
  const std::string layout =
      verify ? fmt::format("batch[{}x{}]", lengths.size(), fed) : packed_layout(lengths);
  return cases::Case("gdr", {{"layout", layout},
                             {"H", std::to_string(p.H)},
                             {"HV", std::to_string(p.HV)},
                             {"K", std::to_string(p.K)},
                             {"V", std::to_string(p.V)},
                             {"dtype", cases::dtype_name(p.dtype)},
                             {"l2", "1"},
                             {"state", "rand"},
                             {"cache", verify ? (p.accept_verifies() ? "accept" : "spec")
                                              : (p.ckpt_prefills() ? "ckpt" : "prefill")},
                             {"calls", std::to_string(verify ? (p.accept_verifies() ? 1 : fed)
                                                             : (p.ckpt_prefills() ? p.block : 1))},
                             {"seed", std::to_string(p.seed)}});
}

// The token rows of `ids` from the token pool, into a [rows, ...] tensor of the call.
Tensor gather_tokens(const Tensor& pool, const std::vector<int64_t>& ids,
                     std::vector<int64_t> shape) {
  Tensor t(pool.name(), pool.dtype(), std::move(shape));
  const size_t row = pool.nbytes() / static_cast<size_t>(pool.shape()[0]);
  for (size_t i = 0; i < ids.size(); ++i)
    std::memcpy(static_cast<uint8_t*>(t.data()) + i * row,
                static_cast<const uint8_t*>(pool.data()) + ids[i] * row, row);
  return t;
}

class Runtime {
 public:
  Runtime(const Params& p, const Scenario& sc, const TensorMap& in, TensorMap& out)
      : p_(p),
        sc_(sc),
        in_(in),
        out_(out),
        per_(p.HV * p.K * p.V),
        lanes_(static_cast<size_t>(p.lanes), State(static_cast<size_t>(per_), 0.0f)),
        lane_tokens_(static_cast<size_t>(p.lanes)),
        lane_accepted_(static_cast<size_t>(p.lanes), 0) {}

  Status call(const ScenarioCall& call, const RunCall& run) {
    const cases::Case cc = call_case(p_, call);
    const bool verify = call.info.kind == "verify";
    const int64_t n = static_cast<int64_t>(call.info.rows.size()), fed = 1 + p_.spec;
    std::vector<int64_t> ids;
    for (const auto& r : call.row_tokens) ids.insert(ids.end(), r.begin(), r.end());
    const int64_t tokens = static_cast<int64_t>(ids.size());
    const std::vector<int64_t> lead =
        verify ? std::vector<int64_t>{n, fed} : std::vector<int64_t>{1, tokens};
    TensorMap in;
    auto add = [&](const char* name, std::vector<int64_t> tail) {
      std::vector<int64_t> shape = lead;
      shape.insert(shape.end(), tail.begin(), tail.end());
      in.add(gather_tokens(in_.at(name), ids, shape));
    };
    add("q", {p_.H, p_.K});
    add("k", {p_.H, p_.K});
    add("v", {p_.HV, p_.V});
    add("g", {p_.HV});
    add("beta", {p_.HV});
    // Each row's state before the call: zero after a reset, the checkpoint of a prefix hit, or
    // what the lane holds.
    std::vector<const State*> start;
    for (const DrivenRow& row : call.info.rows) {
      if (row.reset) lanes_[row.lane].assign(static_cast<size_t>(per_), 0.0f);
      if (row.hit_request >= 0)
        lanes_[row.lane] = checkpoints_.at({row.hit_request, row.hit_block});
      start.push_back(&lanes_[row.lane]);
    }
    // A serving-contract call (cache=accept or ckpt) reads and writes the rows of its table.
    const bool serving = verify ? p_.accept_verifies() : p_.ckpt_prefills();
    gdr::ServingSlots table;
    if (serving) {
      table = gdr::serving_slots(gdr::decode(cc));
      serving_inputs(call, table, start, in);
    } else if (verify) {
      const gdr::Params d = gdr::decode(cc);
      const std::vector<int32_t> slots = gdr::pool_slots(d);
      Tensor& pool =
          in.add(Tensor("state_pool", DType::kF32, {gdr::pool_size(d), p_.HV, p_.K, p_.V}));
      std::memset(pool.data(), 0, pool.nbytes());
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(pool.as<float>() + slots[i] * per_, start[i]->data(), per_ * sizeof(float));
      Tensor& s = in.add(Tensor("state_slots", DType::kI32, {n}));
      std::memcpy(s.data(), slots.data(), s.nbytes());
    } else {
      add_cu_seqlens(call, in);
      Tensor& s0 = in.add(Tensor("initial_state", DType::kF32, {n, p_.HV, p_.K, p_.V}));
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(s0.as<float>() + i * per_, start[i]->data(), per_ * sizeof(float));
    }
    StatusOr<TensorMap> ran = run(call.info, cc, in);
    if (!ran.ok()) {
      const std::string m =
          fmt::format("call {} ({}): {}", call.info.index, call.info.kind, ran.status().message());
      return ran.status().code() == StatusCode::kUnsupported ? Status::Unsupported(m)
                                                             : Status::Internal(m);
    }
    const TensorMap& got = ran.value();
    // The state after row i's token j (verify: token_states; prefill: only its last token).
    // A serving-contract call: the pool row the kernel wrote it to (ckpt: the row of the block
    // holding token j, which holds the state after that block's last token or the row's last
    // token).
    auto state_after = [&](int64_t i, int64_t j) {
      const float* s = serving
                           ? got.at("state_pool").as<float>() +
                                 table.table[i * table.columns + (verify ? j : j / p_.block)] * per_
                       : verify ? got.at("token_states").as<float>() + (i * fed + j) * per_
                                : got.at("final_state").as<float>() + i * per_;
      return State(s, s + per_);
    };
    const Tensor& o = got.at("o");
    const size_t orow = o.nbytes() / static_cast<size_t>(std::max<int64_t>(1, tokens));
    int64_t first = 0;  // the row's first token in the call
    for (int64_t i = 0; i < n; ++i) {
      const DrivenRow& row = call.info.rows[i];
      const int64_t kept = verify ? 1 + row.accepted : row.tokens;
      std::memcpy(static_cast<uint8_t*>(out_.at("o").data()) +
                      (sc_.first_row[row.request] + row.position) * orow,
                  static_cast<const uint8_t*>(o.data()) + first * orow, kept * orow);
      for (const auto& [block, j] : row.checkpoints)
        checkpoints_[{row.request, block}] = state_after(i, j);
      lanes_[row.lane] = state_after(i, kept - 1);
      // What the lane's rows hold for the next verify: this call's state after every token.
      lane_tokens_[row.lane].clear();
      lane_accepted_[row.lane] = verify ? row.accepted : 0;
      if (serving && verify)
        for (int64_t j = 0; j < fed; ++j) lane_tokens_[row.lane].push_back(state_after(i, j));
      std::memcpy(out_.at("final_state").as<float>() + row.request * per_, lanes_[row.lane].data(),
                  per_ * sizeof(float));
      first += row.tokens;
    }
    return Status::Ok();
  }

 private:
  // A prefill's cu_seqlens: its rows' pieces, packed.
  static void add_cu_seqlens(const ScenarioCall& call, TensorMap& in) {
    const int64_t n = static_cast<int64_t>(call.info.rows.size());
    Tensor& cu = in.add(Tensor("cu_seqlens", DType::kI64, {n + 1}));
    cu.as<int64_t>()[0] = 0;
    for (int64_t i = 0; i < n; ++i)
      cu.as<int64_t>()[i + 1] = cu.as<int64_t>()[i] + call.info.rows[i].tokens;
  }

  // A serving-contract call's pool, as a runtime's pool holds it. A verify row's rows hold the
  // lane's previous verify's state after each token (or stale states) with the start state in
  // column a of the lane's last acceptance, and num_accepted_tokens = 1 + a: the kernel itself
  // must resume from the right row. A prefill row's initial state is its start state, and every
  // block row is stale until the kernel writes its checkpoint there.
  void serving_inputs(const ScenarioCall& call, const gdr::ServingSlots& table,
                      const std::vector<const State*>& start, TensorMap& in) {
    const bool verify = call.info.kind == "verify";
    const int64_t n = static_cast<int64_t>(call.info.rows.size());
    Tensor& pool = in.add(Tensor("state_pool", DType::kF32, {table.rows, p_.HV, p_.K, p_.V}));
    const cases::Stream stale(p_.seed, fmt::format("serve/stale/{}", call.info.index));
    for (int64_t i = 0; i < pool.numel(); ++i)
      pool.as<float>()[i] = static_cast<float>(0.5 * stale.normal(static_cast<uint64_t>(i)));
    auto put = [&](int32_t row, const State& s) {
      std::memcpy(pool.as<float>() + row * per_, s.data(), per_ * sizeof(float));
    };
    Tensor& slots =
        in.add(Tensor(verify ? "state_indices" : "block_slots", DType::kI32, {n, table.columns}));
    std::copy(table.table.begin(), table.table.end(), slots.as<int32_t>());
    if (!verify) {
      add_cu_seqlens(call, in);
      Tensor& s0 = in.add(Tensor("initial_state", DType::kF32, {n, p_.HV, p_.K, p_.V}));
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(s0.as<float>() + i * per_, start[i]->data(), per_ * sizeof(float));
      return;
    }
    Tensor& accepted = in.add(Tensor("num_accepted_tokens", DType::kI32, {n}));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t lane = call.info.rows[i].lane;
      const std::vector<State>& previous = lane_tokens_[lane];
      const int64_t a = lane_accepted_[lane];  // 0 after a prefill: its state is in column 0
      for (int64_t t = 0; t < table.columns && t < static_cast<int64_t>(previous.size()); ++t)
        put(table.table[i * table.columns + t], previous[t]);
      put(table.table[i * table.columns + a], *start[i]);
      accepted.as<int32_t>()[i] = static_cast<int32_t>(1 + a);
    }
  }

  const Params& p_;
  const Scenario& sc_;
  const TensorMap& in_;
  TensorMap& out_;
  const int64_t per_;
  std::vector<State> lanes_;
  std::vector<std::vector<State>> lane_tokens_;  // accept verifies: the lane's rows' states
  std::vector<int64_t> lane_accepted_;           // drafts the lane's last verify accepted
  std::map<std::pair<int64_t, int64_t>, State> checkpoints_;  // {request, block} -> state
};

class ServeOperation : public Operation {
 public:
  std::vector<OutputSpec> outputs(const cases::Case& c) const override {
    const Params p = decode(c);
    const Scenario sc = expand(p);
    OutputSpec o{"o", p.dtype, {total(sc), p.HV, p.V}};
    for (size_t r = 0; r < sc.requests.size(); ++r)
      if (sc.requests[r].hit_tokens > 0) {
        const int64_t b = sc.first_row[r] * p.HV * p.V;
        o.dont_care.push_back({b, b + sc.requests[r].hit_tokens * p.HV * p.V,
                               fmt::format("request {}'s cached prefix", r)});
      }
    return {o, {"final_state", DType::kF32, {p.requests, p.HV, p.K, p.V}, p.dtype}};
  }

  Values oracle(const cases::Case& c, const TensorMap& in) const override {
    return one_shot(c, in, [](const reference::GatedDeltaRuleArgs& a) {
      return reference::gated_delta_rule(a);
    });
  }

  std::vector<Baseline> baselines(const cases::Case& c, const TensorMap& in,
                                  const PrecisionProfile& precision) const override {
    std::vector<Baseline> out;
    for (const reference::Arithmetic& how : rule_baselines(decode(c).dtype, precision))
      out.push_back({reference::describe(how),
                     one_shot(c, in, [&how](const reference::GatedDeltaRuleArgs& a) {
                       return reference::gated_delta_rule(a, how);
                     })});
    return out;
  }

  std::vector<SeqSlice> slices(const cases::Case& c, const std::string& output) const override {
    const Params p = decode(c);
    const Scenario sc = expand(p);
    std::vector<SeqSlice> s;
    const int64_t row = p.HV * p.V, per = p.HV * p.K * p.V;
    for (int64_t r = 0; r < p.requests; ++r) {
      const int64_t len = static_cast<int64_t>(sc.requests[r].tokens.size());
      if (output == "o")
        s.push_back({r, sc.first_row[r] * row, (sc.first_row[r] + len) * row, row});
      else
        s.push_back({r, r * per, (r + 1) * per, 0});
    }
    return s;
  }

  std::vector<int64_t> sequence_lengths(const cases::Case& c) const override {
    std::vector<int64_t> l;
    for (const Request& q : expand(decode(c)).requests)
      l.push_back(static_cast<int64_t>(q.tokens.size()));
    return l;
  }

  CallMode call_mode(const cases::Case& c) const override {
    return {CallMode::Kind::kDriven, static_cast<int64_t>(expand(decode(c)).calls.size())};
  }

  Status drive(const cases::Case& c, const TensorMap& inputs, TensorMap& outputs,
               const RunCall& run) const override {
    const Params p = decode(c);
    const Scenario sc = expand(p);
    Runtime rt(p, sc, inputs, outputs);
    for (const ScenarioCall& call : sc.calls)
      if (Status st = rt.call(call, run); !st.ok()) return st;
    return Status::Ok();
  }

  std::vector<std::pair<std::string, cases::Case>> driven_calls(
      const cases::Case& c) const override {
    const Params p = decode(c);
    const Scenario sc = expand(p);
    std::vector<std::pair<std::string, cases::Case>> out;
    for (const char* kind : {"prefill", "verify"})
      for (const ScenarioCall& call : sc.calls)
        if (call.info.kind == kind) {
          out.push_back({kind, call_case(p, call)});
          break;
        }
    return out;
  }

  std::string explain_failure(const cases::Case& c, int64_t seq, int64_t token) const override {
    const Params p = decode(c);
    const Scenario sc = expand(p);
    if (seq < 0 || seq >= p.requests) return "";
    const Request& q = sc.requests[seq];
    std::string hit;
    if (q.hit_request >= 0) {
      const int64_t block = q.hit_tokens / p.block;
      hit = fmt::format("; it resumed from request {}'s checkpoint at block {} (token {}",
                        q.hit_request, block, q.hit_tokens);
      for (const ScenarioCall& call : sc.calls)
        for (const DrivenRow& row : call.info.rows)
          for (const auto& [b, j] : row.checkpoints)
            if (row.request == q.hit_request && b == block)
              hit += fmt::format(", taken in call {}, a {}", call.info.index, call.info.kind);
      hit += ")";
    }
    // The call that fed the token (for a per-request output: the request's last call).
    const ScenarioCall* at = nullptr;
    const ScenarioCall* before = nullptr;  // the request's call before `at`
    const DrivenRow* row_at = nullptr;
    const ScenarioCall* previous = nullptr;
    for (const ScenarioCall& call : sc.calls) {
      for (const DrivenRow& row : call.info.rows) {
        if (row.request != seq) continue;
        const int64_t kept = row.accepted >= 0 ? 1 + row.accepted : row.tokens;
        if (token < 0 || (token >= row.position && token < row.position + kept)) {
          at = &call;
          row_at = &row;
          before = previous;
        }
        previous = &call;
      }
      if (token >= 0 && at) break;
    }
    if (!at) return fmt::format("request {}{}", seq, hit);
    const int64_t t = token >= 0 ? token : static_cast<int64_t>(q.tokens.size()) - 1;
    const std::string what = row_at->accepted >= 0 ? fmt::format("verify, {} of {} drafts accepted",
                                                                 row_at->accepted, p.spec)
                                                   : std::string("prefill");
    // A row wrong from its first token started from a wrong state: say where that came from.
    std::string from;
    if (token >= 0 && token == row_at->position) {
      if (row_at->hit_request >= 0)
        from = "; the state it started from is that checkpoint";
      else if (row_at->reset)
        from = "; it started from its lane, reset to zero";
      else if (before)
        from = fmt::format("; the state it started from was left by call {} ({})",
                           before->info.index, before->info.kind);
    }
    return fmt::format("request {}, call {} ({}, lane {}), block {} (token {}){}{}", seq,
                       at->info.index, what, row_at->lane, t / p.block, t, hit, from);
  }

 private:
  static int64_t total(const Scenario& sc) {
    return sc.first_row.empty()
               ? 0
               : sc.first_row.back() + static_cast<int64_t>(sc.requests.back().tokens.size());
  }
};

}  // namespace

const Operation& operation() {
  static const ServeOperation op;
  return op;
}

}  // namespace deltacheck::ops::serve
