// The SSD token recurrence in compute type T: the oracle (T = double) and the fp32 recurrence
// baseline (selective_state_update's arithmetic, one token at a time).
//   S <- exp(dt A) S + dt x B^T;  y = S C + D x;  y <- y silu(z)
#include <cmath>
#include <vector>

#include "reference/ssd.h"

namespace deltacheck::reference {
namespace {

template <typename T>
SsdResult recurrent(const SsdArgs& a, Rounding output, bool log_exp) {
  const int64_t H = a.num_heads, P = a.head_dim, G = a.num_groups, N = a.state_dim;
  return ssd_detail::for_each_lane<T>(
      a, [&](const ssd_detail::Lane& L, int64_t g, std::vector<T>& S, SsdResult& r) {
        const T A = static_cast<T>(a.A[L.head]);
        for (int64_t t = L.begin; t < L.begin + L.length; ++t) {
          const int64_t tok = L.row * a.seq_len + t;
          const T dt = ssd_detail::step<T>(a, a.dt[tok * H + L.head], L.head, log_exp);
          const T decay = std::exp(dt * A);
          const double* b = a.Bm + (tok * G + g) * N;
          const double* c = a.Cm + (tok * G + g) * N;
          const int64_t xo = (tok * H + L.head) * P;
          for (int64_t p = 0; p < P; ++p) {
            const T dx = dt * static_cast<T>(a.x[xo + p]);
            T* Sp = S.data() + p * N;
            T acc = T(0);
            for (int64_t n = 0; n < N; ++n) {
              Sp[n] = decay * Sp[n] + dx * static_cast<T>(b[n]);
              acc += Sp[n] * static_cast<T>(c[n]);
            }
            r.y[xo + p] = ssd_detail::finish<T>(a, acc, L.head, xo + p, output);
          }
        }
      });
}

}  // namespace

SsdResult ssd_recurrent(const SsdArgs& a, const SsdArithmetic& how) {
  return how.fp32 ? recurrent<float>(a, how.output, how.softplus_log_exp)
                  : recurrent<double>(a, how.output, how.softplus_log_exp);
}

}  // namespace deltacheck::reference
