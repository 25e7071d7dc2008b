// Deliberately wrong serving runtimes (ops/serve scenarios), each a bug of real runtimes around
// correct kernels: the cpu kernels run every call, and the runtime hands them, or keeps from
// them, the wrong state. Tests assert each is flagged with the request, call and block named.
//   wrong:serve-lookahead        a block checkpoint taken during a verify call that had rejected
//                                drafts holds the state after the last draft (it absorbed them),
//                                and a later request's prefix hit resumes from it (vLLM #48375)
//   wrong:serve-last-draft       after a verify call the lane keeps the last draft's state, not
//                                the accepted token's
//   wrong:serve-late-checkpoint  the checkpoint of block b holds the state at block b + 1
//   wrong:serve-no-reset         a lane freed by a finished request is reused without a reset
#include <cstring>
#include <string>

#include "backends/backends.h"
#include "fmt/format.h"

namespace deltacheck::backends {
namespace {

using cases::Tensor;
using cases::TensorMap;

class WrongServeBackend : public Backend {
 public:
  bool deliberately_wrong() const override { return true; }
  bool keeps_call_memory() const override { return true; }
  Support supports(const cases::Case& c) const override {
    if (c.op() != "gdr") return Support::No("serving scenarios' gdr calls only");
    const std::string cache = c.get("cache");
    if (cache == "ckpt" || cache == "accept")
      return Support::No(
          "a runtime that passes states on itself (contract=plain scenarios); "
          "under contract=serving the kernels keep them: see wrong:ckpt-* and "
          "wrong:accept-*");
    return Support::Yes();
  }
  Status run(const cases::Case& c, const TensorMap& in, TensorMap& out) override {
    return run_cpu_gdr_case(c, in, out);
  }

 protected:
  static size_t per_state(const Tensor& states, int64_t rows) {
    return static_cast<size_t>(states.numel() / rows);
  }
  // The state row i of a call's verify starts from (its pool slot), or its prefill initial state.
  static float* start_state(TensorMap& in, int64_t i) {
    if (Tensor* s0 = in.find("initial_state"))
      return s0->as<float>() + i * per_state(*s0, s0->shape()[0]);
    Tensor& pool = in.at("state_pool");
    const int32_t slot = in.at("state_slots").as<int32_t>()[i];
    return pool.as<float>() + slot * per_state(pool, pool.shape()[0]);
  }
  // The state after token j of verify row i (token_states), or after prefill row i (final_state).
  static float* state_after(TensorMap& out, int64_t i, int64_t j) {
    if (Tensor* ts = out.find("token_states")) {
      const int64_t fed = ts->shape()[1];
      return ts->as<float>() + (i * fed + j) * per_state(*ts, ts->shape()[0] * fed);
    }
    Tensor& fs = out.at("final_state");
    return fs.as<float>() + i * per_state(fs, fs.shape()[0]);
  }
  static size_t state_floats(const TensorMap& out) {
    const Tensor& s = out.at(out.find("token_states") ? "token_states" : "final_state");
    int64_t lead = s.shape()[0];
    if (s.shape().size() == 5) lead *= s.shape()[1];
    return static_cast<size_t>(s.numel() / lead);
  }
  static std::string key(const char* what, int64_t a, int64_t b) {
    return fmt::format("{}/{}/{}", what, a, b);
  }
};

class ServeLookahead : public WrongServeBackend {
 public:
  std::string name() const override { return "wrong:serve-lookahead"; }
  std::string description() const override {
    return "deliberately wrong runtime: a block checkpoint that absorbed rejected drafts is "
           "reused by a prefix hit (vLLM #48375)";
  }
  Status run_driven(const ops::DrivenCall& call, DriveMemory& memory, const cases::Case& c,
                    const TensorMap& in, TensorMap& out) override {
    TensorMap changed = in;
    for (size_t i = 0; i < call.rows.size(); ++i) {
      const ops::DrivenRow& row = call.rows[i];
      const auto it = memory.find(key("lookahead", row.hit_request, row.hit_block));
      if (row.hit_request >= 0 && it != memory.end())
        std::memcpy(start_state(changed, i), it->second.data(), it->second.size() * 4);
    }
    if (Status st = run(c, changed, out); !st.ok()) return st;
    const int64_t spec = call.kind == "verify" ? out.at("token_states").shape()[1] - 1 : 0;
    for (size_t i = 0; i < call.rows.size(); ++i) {
      const ops::DrivenRow& row = call.rows[i];
      if (row.accepted < 0 || row.accepted == spec) continue;  // no rejected draft
      const float* last = state_after(out, i, spec);
      for (const auto& [block, j] : row.checkpoints)
        memory[key("lookahead", row.request, block)].assign(last, last + state_floats(out));
    }
    return Status::Ok();
  }
};

class ServeLastDraft : public WrongServeBackend {
 public:
  std::string name() const override { return "wrong:serve-last-draft"; }
  std::string description() const override {
    return "deliberately wrong runtime: after a verify call the lane resumes from the last "
           "draft's state instead of the last accepted token's";
  }
  Status run_driven(const ops::DrivenCall& call, DriveMemory& memory, const cases::Case& c,
                    const TensorMap& in, TensorMap& out) override {
    if (Status st = run(c, in, out); !st.ok() || call.kind != "verify") return st;
    const int64_t spec = out.at("token_states").shape()[1] - 1;
    const size_t n = state_floats(out);
    for (size_t i = 0; i < call.rows.size(); ++i) {
      const int64_t a = call.rows[i].accepted;
      if (a != spec) std::memcpy(state_after(out, i, a), state_after(out, i, spec), n * 4);
    }
    return Status::Ok();
  }
};

class ServeLateCheckpoint : public WrongServeBackend {
 public:
  std::string name() const override { return "wrong:serve-late-checkpoint"; }
  std::string description() const override {
    return "deliberately wrong runtime: the checkpoint of block b holds the state at block b + 1";
  }
  Status run_driven(const ops::DrivenCall& call, DriveMemory& memory, const cases::Case& c,
                    const TensorMap& in, TensorMap& out) override {
    TensorMap changed = in;
    for (size_t i = 0; i < call.rows.size(); ++i) {
      const ops::DrivenRow& row = call.rows[i];
      const auto it = memory.find(key("checkpoint", row.hit_request, row.hit_block + 1));
      if (row.hit_request >= 0 && it != memory.end())
        std::memcpy(start_state(changed, i), it->second.data(), it->second.size() * 4);
    }
    if (Status st = run(c, changed, out); !st.ok()) return st;
    for (size_t i = 0; i < call.rows.size(); ++i)
      for (const auto& [block, j] : call.rows[i].checkpoints) {
        const float* s = state_after(out, i, j);
        memory[key("checkpoint", call.rows[i].request, block)].assign(s, s + state_floats(out));
      }
    return Status::Ok();
  }
};

class ServeNoReset : public WrongServeBackend {
 public:
  std::string name() const override { return "wrong:serve-no-reset"; }
  std::string description() const override {
    return "deliberately wrong runtime: a lane freed by a finished request is reused without a "
           "reset";
  }
  Status run_driven(const ops::DrivenCall& call, DriveMemory& memory, const cases::Case& c,
                    const TensorMap& in, TensorMap& out) override {
    TensorMap changed = in;
    for (size_t i = 0; i < call.rows.size(); ++i) {
      const ops::DrivenRow& row = call.rows[i];
      const auto it = memory.find(key("lane", row.lane, 0));
      if (row.reset && it != memory.end())
        std::memcpy(start_state(changed, i), it->second.data(), it->second.size() * 4);
    }
    if (Status st = run(c, changed, out); !st.ok()) return st;
    for (size_t i = 0; i < call.rows.size(); ++i) {
      const ops::DrivenRow& row = call.rows[i];
      const float* s = state_after(out, i, row.accepted >= 0 ? row.accepted : 0);
      memory[key("lane", row.lane, 0)].assign(s, s + state_floats(out));
    }
    return Status::Ok();
  }
};

}  // namespace

std::vector<std::unique_ptr<Backend>> make_wrong_serve_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<ServeLookahead>());
  v.push_back(std::make_unique<ServeLastDraft>());
  v.push_back(std::make_unique<ServeLateCheckpoint>());
  v.push_back(std::make_unique<ServeNoReset>());
  return v;
}

}  // namespace deltacheck::backends
