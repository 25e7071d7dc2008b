// The expansion of a serve case into requests and calls (scenario.h).
#include "ops/serve/scenario.h"

#include <algorithm>
#include <string>

#include "cases/rng.h"

namespace deltacheck::ops::serve {
namespace {

// Draws of the plan, one counter per purpose so that changing one parameter moves few draws.
class Draws {
 public:
  explicit Draws(uint64_t seed) : st_(seed, "serve/plan") {}
  double next() { return st_.uniform(n_++); }
  int64_t below(int64_t n) {  // uniform in [0, n)
    return std::min(n - 1, static_cast<int64_t>(next() * static_cast<double>(n)));
  }

 private:
  cases::Stream st_;
  uint64_t n_ = 0;
};

struct Running {
  int64_t request;
  int64_t position;  // tokens of its sequence already fed
  int64_t steps = 0;
  bool first_call = true;
};

}  // namespace

Scenario expand(const Params& p) {
  Scenario sc;
  Draws d(p.seed);
  int64_t next_token = 0;
  auto fresh = [&next_token](int64_t n) {
    std::vector<int64_t> ids(static_cast<size_t>(n));
    for (int64_t& id : ids) id = next_token++;
    return ids;
  };
  sc.requests.resize(static_cast<size_t>(p.requests));
  for (int64_t r = 0; r < p.requests; ++r) {
    Request& q = sc.requests[r];
    const int64_t lo = std::max<int64_t>(1, p.prompt / 2);
    q.own_prompt = lo + d.below(p.prompt - lo + 1);
    if (p.prefix == Prefix::kShared && r > 0 && d.next() < 0.6) q.hit_request = d.below(r);
  }
  std::vector<bool> finished(static_cast<size_t>(p.requests), false);
  std::vector<bool> busy(static_cast<size_t>(p.lanes), false);
  std::vector<Running> running;
  int64_t admitted = 0;
  while (admitted < p.requests || !running.empty()) {
    // Admission, in arrival order, while a lane is free.
    while (admitted < p.requests) {
      Request& q = sc.requests[admitted];
      if (q.hit_request >= 0 && !finished[q.hit_request]) break;
      const auto lane = std::find(busy.begin(), busy.end(), false);
      if (lane == busy.end()) break;
      *lane = true;
      q.lane = lane - busy.begin();
      if (q.hit_request >= 0) {
        const std::vector<int64_t>& src = sc.requests[q.hit_request].tokens;
        const int64_t blocks = static_cast<int64_t>(src.size()) / p.block;
        if (blocks >= 1) {
          // Half the time the source's last block (the next turn of its conversation), else any.
          q.hit_tokens = (d.next() < 0.5 ? blocks : 1 + d.below(blocks)) * p.block;
          q.tokens.assign(src.begin(), src.begin() + q.hit_tokens);
          // Blocks the source itself took from a cache are checkpointed by their first owner.
          while (q.hit_tokens <= sc.requests[q.hit_request].hit_tokens)
            q.hit_request = sc.requests[q.hit_request].hit_request;
        } else {
          q.hit_request = -1;
        }
      }
      q.prompt = q.hit_tokens + q.own_prompt;
      const std::vector<int64_t> own = fresh(q.own_prompt);
      q.tokens.insert(q.tokens.end(), own.begin(), own.end());
      running.push_back({admitted, q.hit_tokens});
      ++admitted;
    }
    // A prefill call: each prefilling request up to its next block boundary or prompt end
    // (contract=serving: to its prompt end, the kernel checkpointing every block on the way).
    ScenarioCall pre;
    pre.info.kind = "prefill";
    for (Running& run : running) {
      const Request& q = sc.requests[run.request];
      if (run.position >= q.prompt) continue;
      const int64_t end =
          p.ckpt_prefills() ? q.prompt : std::min(q.prompt, (run.position / p.block + 1) * p.block);
      DrivenRow row{run.request, q.lane, run.position, end - run.position};
      if (run.first_call) {
        row.reset = q.hit_request < 0;
        row.hit_request = q.hit_request;
        row.hit_block = q.hit_request >= 0 ? q.hit_tokens / p.block : -1;
        run.first_call = false;
      }
      for (int64_t b = run.position / p.block + 1; b * p.block <= end; ++b)
        row.checkpoints.push_back({b, b * p.block - run.position - 1});
      pre.row_tokens.emplace_back(q.tokens.begin() + run.position, q.tokens.begin() + end);
      pre.info.rows.push_back(row);
      run.position = end;
    }
    if (!pre.info.rows.empty()) {
      pre.info.index = static_cast<int64_t>(sc.calls.size());
      sc.calls.push_back(std::move(pre));
    }
    // A verify call: every decoding request feeds 1 + spec tokens and accepts 1 + a of them.
    ScenarioCall ver;
    ver.info.kind = "verify";
    for (Running& run : running) {
      Request& q = sc.requests[run.request];
      if (run.position < q.prompt) continue;
      const int64_t a = p.accept == Accept::kAll    ? p.spec
                        : p.accept == Accept::kNone ? 0
                                                    : d.below(p.spec + 1);
      DrivenRow row{run.request, q.lane, run.position, 1 + p.spec};
      row.accepted = a;
      const std::vector<int64_t> fed = fresh(1 + p.spec);
      for (int64_t b = run.position / p.block + 1; b * p.block <= run.position + 1 + a; ++b)
        row.checkpoints.push_back({b, b * p.block - run.position - 1});
      q.tokens.insert(q.tokens.end(), fed.begin(), fed.begin() + 1 + a);
      ver.row_tokens.push_back(fed);
      ver.info.rows.push_back(row);
      run.position += 1 + a;
      ++run.steps;
    }
    if (!ver.info.rows.empty()) {
      ver.info.index = static_cast<int64_t>(sc.calls.size());
      sc.calls.push_back(std::move(ver));
    }
    // Requests done after their last verify call leave; their lanes become free.
    for (auto it = running.begin(); it != running.end();) {
      if (it->steps < p.steps) {
        ++it;
        continue;
      }
      finished[it->request] = true;
      busy[sc.requests[it->request].lane] = false;
      it = running.erase(it);
    }
  }
  sc.pool_tokens = next_token;
  int64_t row = 0;
  for (const Request& q : sc.requests) {
    sc.first_row.push_back(row);
    row += static_cast<int64_t>(q.tokens.size());
  }
  return sc;
}

}  // namespace deltacheck::ops::serve
