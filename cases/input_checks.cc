// Validation of inputs read from files against the case they claim to be (cases/input_checks.h).
#include "cases/input_checks.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>

#include "cases/generate.h"

namespace deltacheck::cases {
namespace {

std::string num(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

std::vector<int64_t> int_values(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::kI64)
      v[i] = t.as<int64_t>()[i];
    else if (t.dtype() == DType::kI32)
      v[i] = t.as<int32_t>()[i];
    else
      v[i] = static_cast<int64_t>(t.get(i));
  }
  return v;
}

bool same_bytes(const Tensor& a, const Tensor& b, int64_t& first) {
  const int es = dtype_size(a.dtype());
  const auto* pa = static_cast<const uint8_t*>(a.data());
  const auto* pb = static_cast<const uint8_t*>(b.data());
  for (int64_t i = 0; i < a.numel(); ++i)
    if (std::memcmp(pa + i * es, pb + i * es, es) != 0) {
      first = i;
      return false;
    }
  return true;
}

Status bad(const std::string& name, const std::string& rule) {
  return Status::InvalidArgument("inputs/" + name + ": " + rule);
}

}  // namespace

Status check_cu_seqlens(const std::vector<int64_t>& cu, int64_t total) {
  if (cu.empty()) return Status::InvalidArgument("empty: needs N+1 >= 1 entries");
  if (cu[0] != 0)
    return Status::InvalidArgument("cu_seqlens[0] is " + std::to_string(cu[0]) + ", must be 0");
  for (size_t i = 0; i < cu.size(); ++i) {
    const std::string at = "cu_seqlens[" + std::to_string(i) + "] = " + std::to_string(cu[i]);
    if (cu[i] < 0) return Status::InvalidArgument(at + " is negative");
    if (cu[i] > std::numeric_limits<int32_t>::max())
      return Status::InvalidArgument(at + " is beyond int32 (token offsets must fit in int32)");
    if (i > 0 && cu[i] < cu[i - 1])
      return Status::InvalidArgument("decreases at index " + std::to_string(i) + " (" +
                                     std::to_string(cu[i]) + " after " + std::to_string(cu[i - 1]) +
                                     "): must be non-decreasing");
  }
  if (cu.back() != total)
    return Status::InvalidArgument("ends at " + std::to_string(cu.back()) +
                                   ", must end at the token count T = " + std::to_string(total));
  return Status::Ok();
}

Status check_state_slots(const std::vector<int64_t>& slots, int64_t rows) {
  std::map<int64_t, size_t> owner;
  for (size_t s = 0; s < slots.size(); ++s) {
    if (slots[s] < 0) continue;  // padding entry
    if (slots[s] >= rows)
      return Status::InvalidArgument("slot " + std::to_string(slots[s]) + " of sequence " +
                                     std::to_string(s) + " is out of range: the pool has " +
                                     std::to_string(rows) + " rows");
    auto [it, fresh] = owner.emplace(slots[s], s);
    if (!fresh)
      return Status::InvalidArgument("slot " + std::to_string(slots[s]) +
                                     " is addressed by sequences " + std::to_string(it->second) +
                                     " and " + std::to_string(s) +
                                     ": duplicates are not allowed (they race on one state)");
  }
  return Status::Ok();
}

namespace {

std::string names_of(const TensorMap& want) {
  std::string names;
  for (const Tensor& w : want.all()) names += (names.empty() ? "" : ", ") + w.name();
  return names;
}

}  // namespace

Status check_input_spec(const TensorMap& want, const std::string& name, DType dtype,
                        const std::vector<int64_t>& shape) {
  const Tensor* w = want.find(name);
  if (!w) return bad(name, "not an input of this case (it has " + names_of(want) + ")");
  if (dtype != w->dtype())
    return bad(name, std::string("dtype ") + dtype_name(dtype) + ", the case implies " +
                         dtype_name(w->dtype()));
  if (shape != w->shape())
    return bad(name,
               "shape " + shape_string(shape) + ", the case implies " + shape_string(w->shape()));
  return Status::Ok();
}

Status check_case_inputs(const Case& c, const TensorMap& inputs, bool same_generator,
                         const TensorMap* generated) {
  const TensorMap own = generated ? TensorMap() : generate_inputs(c);
  const TensorMap& want = generated ? *generated : own;
  // Names, dtypes and shapes first: every later rule (and every kernel) relies on them.
  for (const Tensor& t : inputs.all())
    if (Status st = check_input_spec(want, t.name(), t.dtype(), t.shape()); !st.ok()) return st;
  for (const Tensor& w : want.all())
    if (!inputs.has(w.name()))
      return bad(w.name(), "missing (the case has " + names_of(want) + ")");
  for (const Tensor& w : want.all()) {
    const Tensor& t = inputs.at(w.name());
    const std::string& name = w.name();
    int64_t first = -1;
    if (name == "cu_seqlens") {
      const std::vector<int64_t> cu = int_values(t), expect = int_values(w);
      if (Status st = check_cu_seqlens(cu, expect.back()); !st.ok()) return bad(name, st.message());
      // Per-sequence metrics are cut from the layout in the id: the boundaries must be its own
      // (where no layout fixes them, those of the generator that made the file).
      if ((c.has("layout") || same_generator) && cu != expect) {
        size_t i = 0;
        while (cu[i] == expect[i]) ++i;
        return bad(name, "cu_seqlens[" + std::to_string(i) + "] = " + std::to_string(cu[i]) +
                             " differs from the case's " + std::to_string(expect[i]) +
                             (c.has("layout") ? " (layout " + c.get("layout") + ")" : ""));
      }
      continue;
    }
    if (name == "state_slots") {
      const Tensor* pool = inputs.find("state_pool");
      const int64_t rows = pool && !pool->shape().empty() ? pool->shape()[0] : 0;
      if (Status st = check_state_slots(int_values(t), rows); !st.ok())
        return bad(name, st.message());
    }
    if (name.find("padding_mask") != std::string::npos) {
      for (int64_t i = 0; i < t.numel(); ++i)
        if (t.get(i) != 0.0 && t.get(i) != 1.0)
          return bad(name, "value " + num(t.get(i)) + " at index " + std::to_string(i) +
                               ": a padding mask holds 0 or 1");
    }
    if (is_floating(t.dtype())) {
      for (int64_t i = 0; i < t.numel(); ++i) {
        const double x = t.get(i);
        if (!std::isfinite(x) && std::isfinite(w.get(i)))
          return bad(name, "non-finite value " + num(x) + " at index " + std::to_string(i) +
                               ": inputs must be finite unless the case generates them so");
      }
    } else if (same_generator && !same_bytes(t, w, first)) {
      // Slots, position ids and masks decide what the operation checks (unchanged pool rows,
      // segments): they must be the ones the case id generates.
      return bad(name, "differs at index " + std::to_string(first) + " (file " + num(t.get(first)) +
                           ", the case generates " + num(w.get(first)) +
                           "): integer inputs are determined by the case id and seed");
    }
  }
  return Status::Ok();
}

}  // namespace deltacheck::cases
