// The pieces gdr_grad and layer_grad share (ops/grad_common.h).
#include "ops/grad_common.h"

#include <algorithm>

#include "ops/decode.h"
#include "ops/repack.h"

namespace deltacheck::ops::grad {

StatusOr<Case> forward_case(const Case& c, const char* grad_op, const char* forward_op,
                            std::initializer_list<const char*> grad_only) {
  expect_op(c, grad_op);
  std::vector<std::pair<std::string, std::string>> params;
  for (const auto& kv : c.params()) {
    const std::string& key = kv.first;  // a plain reference: lambdas may capture it (clang)
    if (std::none_of(grad_only.begin(), grad_only.end(), [&](const char* g) { return key == g; }))
      params.emplace_back(key, kv.second);
  }
  // Derived: the rules for a case given from outside are the gradient op's own (check_given).
  return Case::derive(forward_op, params);
}

std::vector<ParamSpec> schema_params(const OpSchema& forward, std::vector<ParamSpec> upstream) {
  // The backward is of one prefill call: no cache modes.
  std::vector<ParamSpec> params;
  for (const ParamSpec& p : forward.params)
    if (p.key != "cache" && p.key != "calls" && p.key != "seed") params.push_back(p);
  for (ParamSpec& p : upstream) params.push_back(std::move(p));
  params.push_back(integer("tail", "0", 0, 4096,
                           "padding tokens after cu_seqlens[-1] (packed layouts): gradients 0"));
  params.push_back(seed_param());
  return params;
}

Status check_forward_and_tail(const Case& c, const StatusOr<Case>& forward) {
  if (!forward.ok()) return forward.status();
  if (c.get_int("tail") > 0 && !forward.value().layout().has_cu_seqlens())
    return invalid("tail=" + c.get("tail") +
                   " needs a packed layout (tokens past cu_seqlens[-1]); got " + c.get("layout"));
  return Status::Ok();
}

void fill_do(Tensor& dout, const Layout& layout, uint64_t seed, const GenOptions& o, int64_t row,
             int64_t tail) {
  for (int64_t s = 0; s < layout.num_seqs(); ++s) {
    const Stream st = sequence_stream(seed, o, "do", s);
    const int64_t base = token_row(layout, s, 0);
    for (int64_t i = 0; i < layout.lengths[s] * row; ++i)
      dout.set(base * row + i, st.normal(static_cast<uint64_t>(i)));
  }
  if (tail > 0)
    fill_rows(dout, seed, layout.total_tokens(), tail, row,
              [](const Stream& st, int64_t i) { return st.normal(i); });
}

void fill_upstream(Tensor& t, int64_t num_seqs, uint64_t seed, const GenOptions& o, int64_t per) {
  for (int64_t s = 0; s < num_seqs; ++s) {
    const Stream st = sequence_stream(seed, o, t.name(), s);
    for (int64_t i = 0; i < per; ++i) t.set(s * per + i, 0.5 * st.normal(i));
  }
}

SeqSlice token_slice(const Layout& layout, int64_t seq, int64_t per_token) {
  const int64_t b = token_row(layout, seq, 0);
  return {seq, b * per_token, (b + layout.lengths[seq]) * per_token, per_token};
}

SeqSlice sequence_slice(int64_t seq, int64_t per) { return {seq, seq * per, (seq + 1) * per, 0}; }

Values BackwardOperation::oracle(const Case& c, const TensorMap& in) const {
  return backward(c, in, nullptr);
}

std::vector<Baseline> BackwardOperation::baselines(const Case& c, const TensorMap& in,
                                                   const PrecisionProfile& precision) const {
  const Problem p = problem(c);
  std::vector<Baseline> out;
  for (const reference::Arithmetic& how : grad_baselines(p.dtype, precision))
    out.push_back({p.prefix + reference::describe(how), backward(c, in, &how)});
  return out;
}

std::vector<int64_t> BackwardOperation::sequence_lengths(const Case& c) const {
  return problem(c).layout.lengths;
}

int64_t BackwardOperation::tail_rows(const Case& c) const { return problem(c).tail; }

}  // namespace deltacheck::ops::grad
