// Deliberately wrong handling of state between calls and in state pools, each a bug seen in real
// serving code. Tests assert the verdict each gets.
//   wrong:decode-wrong-slot    decode reads (and writes) the pool slot of the next entry
//   wrong:pool-writes-padding  padding entries (slot -1) are processed Python-style: slot -1 is
//                              the pool's last row, which gets overwritten
//   wrong:bf16-state           states are kept in bf16 between calls
//   wrong:ckpt-late            cache=ckpt: each checkpoint one block late (block b's row gets
//                              the state at the end of block b + 1)
//   wrong:ckpt-early           cache=ckpt: each checkpoint written before its block's last token
//   wrong:accept-last-draft    cache=accept: resumes from the last draft's state, whatever was
//                              accepted
//   wrong:accept-count-ignored cache=accept: ignores num_accepted_tokens (resumes from the first
//                              token's row, as a plain continuous-batching decode does)
//   wrong:tree-chain           cache=tree: the draft tree taken as a chain (each token from the
//                              previous token's state, as a multi-token decode does)
//   wrong:tree-parent-off-by-one cache=tree: each token from the token before its parent (the
//                              parent index read one too low; parent 0 reads the start state)
#include <algorithm>
#include <cstring>

#include "backends/backends.h"
#include "kernels/cpu/gated_delta_rule.h"
#include "ops/gdr/problem.h"
#include "ops/gdr/serving.h"

namespace deltacheck::backends {
namespace {

class WrongCacheBackend : public Backend {
 public:
  bool deliberately_wrong() const override { return true; }
};

class DecodeWrongSlot : public WrongCacheBackend {
 public:
  std::string name() const override { return "wrong:decode-wrong-slot"; }
  std::string description() const override {
    return "deliberately wrong: decode reads and writes the next entry's pool slot";
  }
  Support supports(const cases::Case& c) const override {
    using ops::gdr::Cache;
    if (c.op() != "gdr") return Support::No("decode and pooled modes only");
    const Cache cache = ops::gdr::decode(c).cache;
    if (cache == Cache::kPool || cache == Cache::kSpec || cache == Cache::kDecode ||
        cache == Cache::kDynamic)
      return Support::Yes();
    return Support::No("decode and pooled modes only");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    if (ops::gdr::decode(c).cache == ops::gdr::Cache::kDynamic)
      return Status::Ok();  // never called: dynamic runs as calls
    cases::TensorMap shifted = in;
    if (cases::Tensor* slots = shifted.find("state_slots")) {
      // Rotate the slots of the real (non-padding) entries by one.
      int32_t* s = slots->as<int32_t>();
      std::vector<int64_t> real;
      for (int64_t i = 0; i < slots->numel(); ++i)
        if (s[i] >= 0) real.push_back(i);
      if (real.size() > 1) {
        const int32_t first = s[real[0]];
        for (size_t i = 0; i + 1 < real.size(); ++i) s[real[i]] = s[real[i + 1]];
        s[real.back()] = first;
      }
    } else if (cases::Tensor* s0 = shifted.find("initial_state")) {
      // Unpooled decode: row i of the state table is read for entry i + 1.
      const size_t per = s0->nbytes() / static_cast<size_t>(s0->shape()[0]);
      std::vector<uint8_t> copy(static_cast<const uint8_t*>(s0->data()),
                                static_cast<const uint8_t*>(s0->data()) + s0->nbytes());
      for (int64_t i = 0; i < s0->shape()[0]; ++i)
        std::memcpy(static_cast<uint8_t*>(s0->data()) + i * per,
                    copy.data() + ((i + 1) % s0->shape()[0]) * per, per);
    }
    return run_cpu_gdr_case(c, shifted, out);
  }
};

class PoolWritesPadding : public WrongCacheBackend {
 public:
  std::string name() const override { return "wrong:pool-writes-padding"; }
  std::string description() const override {
    return "deliberately wrong: padding entries (slot -1) update the pool's last row";
  }
  Support supports(const cases::Case& c) const override {
    if (c.op() == "gdr" && ops::gdr::decode(c).cache == ops::gdr::Cache::kPool)
      return Support::Yes();
    return Support::No("pool mode only");
  }
  // The real entries run as they should; then each padding entry runs on the pool row its slot
  // -1 names in Python (the last row), one at a time: the kernels reject two entries sharing a
  // row, which a kernel with this bug does not check.
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    if (Status st = run_cpu_gdr_case(c, in, out); !st.ok()) return st;
    const cases::Tensor& slots = in.at("state_slots");
    const int32_t rows = static_cast<int32_t>(in.at("state_pool").shape()[0]);
    for (int64_t i = 0; i < slots.numel(); ++i) {
      if (slots.as<int32_t>()[i] >= 0) continue;
      cases::TensorMap step = in;
      step.at("state_pool") = out.at("state_pool");
      cases::Tensor& only = step.at("state_slots");
      for (int64_t j = 0; j < only.numel(); ++j)
        only.as<int32_t>()[j] = j == i ? slots.as<int32_t>()[i] + rows : -1;
      if (Status st = run_cpu_gdr_case(c, step, out); !st.ok()) return st;
    }
    return Status::Ok();
  }
};

class Bf16State : public WrongCacheBackend {
 public:
  std::string name() const override { return "wrong:bf16-state"; }
  std::string description() const override {
    return "deliberately wrong: recurrent states stored in bf16 between calls";
  }
  Support supports(const cases::Case& c) const override {
    if (c.op() == "gdr" && ops::gdr::decode(c).cache != ops::gdr::Cache::kNone)
      return Support::Yes();
    return Support::No("modes that keep a state only");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    if (Status st = run_cpu_gdr_case(c, in, out); !st.ok()) return st;
    for (const char* name : {"final_state", "state_pool", "token_states"})
      if (cases::Tensor* t = out.find(name))
        for (int64_t i = 0; i < t->numel(); ++i)
          t->as<float>()[i] = bf16_to_float(float_to_bf16(t->as<float>()[i]));
    return Status::Ok();
  }
};

// A wrong serving kernel: the right one run on altered inputs (and, for ckpt, block sizes).
class WrongServing : public WrongCacheBackend {
 public:
  enum class Bug { kCkptLate, kCkptEarly, kAcceptLastDraft, kAcceptCountIgnored };
  WrongServing(std::string name, std::string description, Bug bug)
      : name_(std::move(name)), description_(std::move(description)), bug_(bug) {}
  std::string name() const override { return name_; }
  std::string description() const override { return description_; }
  // Both serving modes and plain prefills, so that serving scenarios (contract=accept: prefill
  // and accept calls; contract=serving: ckpt and accept calls) run on it; the bug is in one
  // mode, the others run the right kernel.
  Support supports(const cases::Case& c) const override {
    if (c.op() == "gdr") {
      const ops::gdr::Params d = ops::gdr::decode(c);
      if (d.serving() || d.cache == ops::gdr::Cache::kPrefill) return Support::Yes();
    }
    return Support::No("cache=ckpt, cache=accept and cache=prefill only");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    const ops::gdr::Cache mode = ops::gdr::decode(c).cache;
    if (mode != (ckpt() ? ops::gdr::Cache::kCkpt : ops::gdr::Cache::kAccept))
      return run_cpu_gdr_case(c, in, out);
    cases::TensorMap wrong = in;
    if (!ckpt()) {
      // The accepted count every sequence is resumed with: T (the last draft) or 1 (ignored).
      const int32_t tokens = static_cast<int32_t>(ops::gdr::decode(c).T);
      cases::Tensor& acc = wrong.at("num_accepted_tokens");
      for (int64_t i = 0; i < acc.numel(); ++i)
        acc.as<int32_t>()[i] = bug_ == Bug::kAcceptLastDraft ? tokens : 1;
      return run_cpu_gdr_case(c, wrong, out);
    }
    // Late: block b's row holds the state one block further on (the kernel's slot table shifted
    // by one block; the last block's row is never written and keeps its old contents).
    cases::Tensor& slots = wrong.at("block_slots");
    const int64_t cols = slots.shape()[1];
    int32_t* t = slots.as<int32_t>();
    const ops::gdr::Params d = ops::gdr::decode(c);
    const int64_t bs = ops::gdr::ckpt_block_size(d);
    if (bug_ == Bug::kCkptLate) {
      for (int64_t s = 0; s < slots.shape()[0]; ++s) {
        std::vector<int32_t> row(t + s * cols, t + (s + 1) * cols);
        for (int64_t b = 0; b < cols; ++b) t[s * cols + b] = b == 0 ? -1 : row[b - 1];
      }
      return run_cpu_gdr_case(c, wrong, out);
    }
    // Early: the kernel with one-token blocks, each full block's row taking the state one token
    // before the block's end (a partial last block's row still gets the running state).
    int64_t longest = 1;
    for (int64_t len : d.layout.lengths) longest = std::max(longest, len);
    std::vector<int32_t> table(static_cast<size_t>(d.N * longest), -1);
    for (int64_t s = 0; s < d.N; ++s) {
      const int64_t len = d.layout.lengths[s];
      for (int64_t b = 0; b < ops::gdr::ckpt_blocks(d, s); ++b) {
        const int64_t end = std::min((b + 1) * bs, len);
        table[s * longest + (end == (b + 1) * bs ? end - 2 : end - 1)] = t[s * cols + b];
      }
    }
    cases::Tensor& pool = out.at("state_pool");
    std::memcpy(pool.data(), in.at("state_pool").data(), pool.nbytes());
    kernels::cpu::StateCheckpoints ck;
    ck.block_size = 1;
    ck.block_slots = table.data();
    ck.max_blocks = longest;
    ck.pool = pool.as<float>();
    ck.num_rows = pool.shape()[0];
    return kernels::cpu::chunked_gated_delta_rule(ops::gdr::kernel_params(d, in, out), ck);
  }

 private:
  bool ckpt() const { return bug_ == Bug::kCkptLate || bug_ == Bug::kCkptEarly; }
  std::string name_, description_;
  Bug bug_;
};

// A wrong tree verify: the right kernel given wrong parents.
class WrongTree : public WrongCacheBackend {
 public:
  enum class Bug { kChain, kParentOffByOne };
  WrongTree(std::string name, std::string description, Bug bug)
      : name_(std::move(name)), description_(std::move(description)), bug_(bug) {}
  std::string name() const override { return name_; }
  std::string description() const override { return description_; }
  Support supports(const cases::Case& c) const override {
    if (c.op() == "gdr" && ops::gdr::decode(c).cache == ops::gdr::Cache::kTree)
      return Support::Yes();
    return Support::No("cache=tree only");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    cases::TensorMap wrong = in;
    cases::Tensor& parents = wrong.at("parents");
    const int64_t tokens = parents.shape()[1];
    int32_t* p = parents.as<int32_t>();
    for (int64_t i = 0; i < parents.numel(); ++i) {
      const int32_t t = static_cast<int32_t>(i % tokens);
      p[i] = bug_ == Bug::kChain ? t - 1 : std::max(p[i] - 1, -1);
    }
    return run_cpu_gdr_case(c, wrong, out);
  }

 private:
  std::string name_, description_;
  Bug bug_;
};

}  // namespace

std::vector<std::unique_ptr<Backend>> make_wrong_cache_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<DecodeWrongSlot>());
  v.push_back(std::make_unique<PoolWritesPadding>());
  v.push_back(std::make_unique<Bf16State>());
  using Bug = WrongServing::Bug;
  v.push_back(std::make_unique<WrongServing>(
      "wrong:ckpt-late", "deliberately wrong: each block checkpoint is written one block late",
      Bug::kCkptLate));
  v.push_back(std::make_unique<WrongServing>(
      "wrong:ckpt-early",
      "deliberately wrong: each block checkpoint is written before the block's last token",
      Bug::kCkptEarly));
  v.push_back(std::make_unique<WrongServing>(
      "wrong:accept-last-draft",
      "deliberately wrong: speculative verify resumes from the last draft's state",
      Bug::kAcceptLastDraft));
  v.push_back(std::make_unique<WrongServing>(
      "wrong:accept-count-ignored",
      "deliberately wrong: speculative verify ignores num_accepted_tokens",
      Bug::kAcceptCountIgnored));
  v.push_back(std::make_unique<WrongTree>(
      "wrong:tree-chain",
      "deliberately wrong: tree verify takes the draft tree as a chain (each token from the "
      "previous token's state)",
      WrongTree::Bug::kChain));
  v.push_back(std::make_unique<WrongTree>(
      "wrong:tree-parent-off-by-one",
      "deliberately wrong: tree verify takes each token from the token before its parent",
      WrongTree::Bug::kParentOffByOne));
  v.push_back(make_wrong_conv_backend());
  return v;
}

}  // namespace deltacheck::backends
