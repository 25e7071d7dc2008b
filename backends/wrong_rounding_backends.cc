// Deliberately wrong output stores: the `cpu` backend's arithmetic, in fp32 throughout, with the
// bf16 / fp16 outputs stored by a directed rounding instead of round to nearest even. Their error
// is about twice a correct kernel's, which the tolerance allows; the rounding-bias sign test
// (harness/tolerance.h, docs/tolerance.md#rounding-bias) is what catches them:
//   wrong:truncated-store   bf16 / fp16 outputs truncated (round toward zero): a kernel that
//                           keeps the high half of the fp32 bits
//   wrong:round-up-store    bf16 / fp16 outputs rounded toward +infinity
// fp32 outputs (states, dg) are stored as computed. gdr in every cache mode the cpu backend runs,
// and gdr_grad.
#include <cmath>
#include <cstring>

#include "backends/backends.h"
#include "core/half.h"

namespace deltacheck::backends {
namespace {

enum class Store { kTowardZero, kUp };

// bf16 bits of f rounded toward zero: its high half (NaN kept quiet).
uint16_t bf16_toward_zero(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>(u >> 16);
}

// fp16 bits of f rounded toward zero.
uint16_t fp16_toward_zero(float f) {
  const uint32_t u = float_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // inf
  if (a >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7bffu);  // >= 2^16: the largest
  if (a < 0x38800000u) {  // below 2^-14: subnormal in units of 2^-24 (|f| * 2^24 is exact)
    const float units = std::floor(std::fabs(f) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(units));
  }
  return static_cast<uint16_t>(sign | ((a - (112u << 23)) >> 13));  // drop 13 bits, rebias
}

// The bits of f in bf16 or fp16 under `store`. Toward +infinity: the value toward zero, one
// step further from zero when that lost something of a positive f (the next encoding up).
uint16_t stored_bits(DType t, Store store, float f) {
  const uint16_t z = t == DType::kBF16 ? bf16_toward_zero(f) : fp16_toward_zero(f);
  if (store == Store::kTowardZero || !(f > 0)) return z;
  const float back = t == DType::kBF16 ? bf16_to_float(z) : fp16_to_float(z);
  return back == f ? z : static_cast<uint16_t>(z + 1);
}

bool half_width(DType t) { return t == DType::kBF16 || t == DType::kF16; }

class WrongStoreBackend : public Backend {
 public:
  WrongStoreBackend(std::string name, std::string description, Store store)
      : name_(std::move(name)), description_(std::move(description)), store_(store) {}
  std::string name() const override { return name_; }
  std::string description() const override { return description_; }
  bool deliberately_wrong() const override { return true; }
  Support supports(const cases::Case& c) const override {
    if (c.op() == "gdr" || c.op() == "gdr_grad") return Support::Yes();
    return Support::No(name_ + " implements only gdr and gdr_grad");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override;

 private:
  std::string name_, description_;
  Store store_;
};

Status WrongStoreBackend::run(const cases::Case& c, const cases::TensorMap& in,
                              cases::TensorMap& out) {
  // The same case in fp32: bf16 / fp16 inputs widened exactly, outputs computed in fp32.
  const cases::Case wide = c.with("dtype", dtype_name(DType::kF32));
  cases::TensorMap wide_in, wide_out;
  for (const cases::Tensor& t : in.all()) {
    cases::Tensor& w = wide_in.add(
        cases::Tensor(t.name(), half_width(t.dtype()) ? DType::kF32 : t.dtype(), t.shape()));
    if (!half_width(t.dtype())) {
      std::memcpy(w.data(), t.data(), t.nbytes());
      continue;
    }
    for (int64_t i = 0; i < t.numel(); ++i) w.set(i, t.get(i));
  }
  for (const cases::Tensor& t : out.all())
    wide_out.add(
        cases::Tensor(t.name(), half_width(t.dtype()) ? DType::kF32 : t.dtype(), t.shape()));
  const Status st = c.op() == "gdr_grad" ? run_cpu_gdr_grad_case(wide, wide_in, wide_out)
                                         : run_cpu_gdr_case(wide, wide_in, wide_out);
  if (!st.ok()) return st;
  for (cases::Tensor& t : out.all()) {
    const cases::Tensor& w = wide_out.at(t.name());
    if (!half_width(t.dtype())) {
      std::memcpy(t.data(), w.data(), t.nbytes());
      continue;
    }
    const float* src = w.as<float>();
    uint16_t* dst = t.as<uint16_t>();
    for (int64_t i = 0; i < t.numel(); ++i) dst[i] = stored_bits(t.dtype(), store_, src[i]);
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::unique_ptr<Backend>> make_wrong_rounding_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<WrongStoreBackend>(
      "wrong:truncated-store",
      "deliberately wrong: cpu arithmetic in fp32, bf16/fp16 outputs stored by truncation (round "
      "toward zero) instead of round to nearest even",
      Store::kTowardZero));
  v.push_back(std::make_unique<WrongStoreBackend>(
      "wrong:round-up-store",
      "deliberately wrong: cpu arithmetic in fp32, bf16/fp16 outputs rounded toward +infinity "
      "instead of to nearest even",
      Store::kUp));
  return v;
}

}  // namespace deltacheck::backends
