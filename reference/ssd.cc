// What both SSD formulations share: argument checks, the lanes, the discretized step, the
// dispatch on the arithmetic.
#include "reference/ssd.h"

#include <stdexcept>

namespace deltacheck::reference {

int64_t num_sequences(const SsdArgs& a) {
  return a.cu_seqlens.empty() ? a.batch : static_cast<int64_t>(a.cu_seqlens.size()) - 1;
}

void validate(const SsdArgs& a) {
  auto fail = [](const std::string& m) { throw std::invalid_argument("ssd: " + m); };
  if (a.batch < 1 || a.seq_len < 0) fail("batch must be >= 1 and seq_len >= 0");
  if (a.num_heads < 1 || a.head_dim < 1 || a.num_groups < 1 || a.state_dim < 1)
    fail("H, P, G and N must be >= 1");
  if (a.num_heads % a.num_groups != 0)
    fail("H % G != 0 (H=" + std::to_string(a.num_heads) + ", G=" + std::to_string(a.num_groups) +
         ")");
  if (a.batch * a.seq_len > 0 && (!a.x || !a.dt || !a.A || !a.Bm || !a.Cm))
    fail("x, dt, A, B and C are required");
  if (!(a.dt_min <= a.dt_max)) fail("dt_limit needs dt_min <= dt_max");
  if (!a.cu_seqlens.empty()) {
    if (a.batch != 1) fail("cu_seqlens requires batch == 1");
    if (a.cu_seqlens.size() < 2 || a.cu_seqlens.front() != 0 || a.cu_seqlens.back() != a.seq_len)
      fail("cu_seqlens must start at 0 and end at T");
    for (size_t i = 1; i < a.cu_seqlens.size(); ++i)
      if (a.cu_seqlens[i] < a.cu_seqlens[i - 1])
        fail("cu_seqlens is decreasing at index " + std::to_string(i));
  }
}

double ssd_step(const SsdArgs& a, double dt_raw, int64_t head) {
  return ssd_detail::step<double>(a, dt_raw, head);
}

namespace ssd_detail {

std::vector<Lane> lanes(const SsdArgs& a) {
  std::vector<Lane> out;
  const int64_t n = num_sequences(a);
  for (int64_t s = 0; s < n; ++s) {
    const bool packed = !a.cu_seqlens.empty();
    const int64_t begin = packed ? a.cu_seqlens[s] : 0;
    const int64_t len = packed ? a.cu_seqlens[s + 1] - begin : a.seq_len;
    for (int64_t h = 0; h < a.num_heads; ++h) out.push_back({packed ? 0 : s, begin, len, s, h});
  }
  return out;
}

SsdResult empty_result(const SsdArgs& a) {
  const int64_t per = a.num_heads * a.head_dim * a.state_dim;
  SsdResult r;
  r.y.assign(static_cast<size_t>(a.batch * a.seq_len * a.num_heads * a.head_dim), 0.0);
  r.final_state.assign(static_cast<size_t>(num_sequences(a) * per), 0.0);
  if (a.initial_state)
    r.final_state.assign(a.initial_state, a.initial_state + r.final_state.size());
  return r;
}

}  // namespace ssd_detail

std::string describe(const SsdArithmetic& how) {
  std::string s = how.form == SsdForm::kRecurrent ? "ssd recurrent" : "ssd chunked";
  s += how.fp32 ? " fp32" : " fp64";
  if (how.operands != Rounding::kNone)
    s += std::string(", ") + rounding_name(how.operands) + " operands";
  if (how.form == SsdForm::kChunked) s += ", chunk " + std::to_string(how.chunk_size);
  if (how.softplus_log_exp) s += ", softplus log(exp(x) + 1)";
  return s;
}

SsdResult ssd(const SsdArgs& a, const SsdArithmetic& how) {
  validate(a);
  return how.form == SsdForm::kRecurrent ? ssd_recurrent(a, how) : ssd_chunked(a, how);
}

SsdResult ssd(const SsdArgs& a) { return ssd(a, SsdArithmetic{}); }

}  // namespace deltacheck::reference
