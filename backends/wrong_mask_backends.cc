// Deliberately wrong mask builders: the CPU builder with one rule broken each, reproducing the bugs
// deltacheck's mask checks exist for. The tests assert the verdict each one gets.
//   wrong:mask-no-linear-rule         the layer-type -> mask-function table has no entry for
//                                     linear_attention: pre-building per-layer masks fails with
//                                     an error naming it (the original KeyError under a static
//                                     cache) -> error
//   wrong:mask-old-layer-names        knows linear_attention but not the per-backbone names of
//                                     Transformers PR #46738 (linear_attention_mamba, _mamba2,
//                                     _gated_delta_net), as Transformers 5.24.0 does: a hybrid
//                                     config using them gets no masks -> error naming the type
//   wrong:mask-ignore-packing         position_ids never looked at: packed sequences attend
//                                     across their boundaries, and segment derivation sees one
//                                     sequence per row -> fail
//   wrong:mask-static-by-used-length  static-cache masks built for the used length (offset + q)
//                                     as for a dynamic cache, then padded to max_cache_len the way
//                                     zero-padding an additive mask does (unwritten slots become
//                                     visible), with the dynamic cache's "needed" decision -> fail
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backends/backends.h"
#include "backends/mask_adapter.h"
#include "backends/mask_builders.h"

namespace deltacheck::backends {
namespace {

namespace cpu = kernels::cpu;

struct NoLinearRuleApi : CpuMaskApi {
  static Status layer_masks(const std::vector<std::string>& types, const Params& p,
                            LayerMasks* out) {
    // The table as the buggy code had it: attention types only.
    for (const std::string& t : types)
      if (t != "full_attention" && t != "sliding_attention" && t != "chunked_attention")
        return Status::InvalidArgument("no mask function for layer type '" + t + "' (KeyError: '" +
                                       t + "')");
    return cpu::layer_masks(types, p, out);
  }
};

struct OldLayerNamesApi : CpuMaskApi {
  static Status layer_masks(const std::vector<std::string>& types, const Params& p,
                            LayerMasks* out) {
    for (const std::string& t : types)
      if (t.rfind("linear_attention_", 0) == 0)
        return Status::InvalidArgument("no mask function for layer type '" + t + "' (KeyError: '" +
                                       t + "')");
    return cpu::layer_masks(types, p, out);
  }
};

struct IgnorePackingApi : CpuMaskApi {
  static Params unpacked(Params p) {
    p.position_ids = nullptr;
    return p;
  }
  static Status build_bool_mask(const Params& p, uint8_t* out) {
    return cpu::build_bool_mask(unpacked(p), out);
  }
  static Status build_additive_mask(const Params& p, AdditiveFill f, float* out) {
    return cpu::build_additive_mask(unpacked(p), f, out);
  }
  static Status mask_needed(const Params& p, bool* needed) {
    return cpu::mask_needed(unpacked(p), needed);
  }
  static Status fully_masked_rows(const Params& p, uint8_t* out) {
    return cpu::fully_masked_rows(unpacked(p), out);
  }
  static Status layer_masks(const std::vector<std::string>& types, const Params& p,
                            LayerMasks* out) {
    return cpu::layer_masks(types, unpacked(p), out);
  }
  // Every row one sequence, whatever its positions say.
  static Status segments_from_position_ids(const int64_t*, int64_t batch, int64_t len,
                                           PackedSegments* out) {
    std::vector<int64_t> positions(static_cast<size_t>(batch * len));
    for (size_t i = 0; i < positions.size(); ++i)
      positions[i] = static_cast<int64_t>(i) % std::max<int64_t>(1, len);
    return cpu::segments_from_position_ids(positions.data(), batch, len, out);
  }
};

struct StaticByUsedLengthApi : CpuMaskApi {
  // The parameters the buggy code used: kv_length = tokens written, not max_cache_len.
  struct Shrunk {
    Params p;
    std::vector<uint8_t> padding;  // the first `used` columns of each padding row
    int64_t used = 0;
  };
  static Shrunk by_used_length(const Params& p) {
    Shrunk s{p, {}, p.q_offset + p.q_len};
    s.p.kv_length = s.used;
    s.p.static_cache = false;
    if (p.padding_mask) {
      for (int64_t b = 0; b < p.batch; ++b)
        s.padding.insert(s.padding.end(), p.padding_mask + b * p.kv_length,
                         p.padding_mask + b * p.kv_length + s.used);
      s.p.padding_mask = s.padding.data();
    }
    return s;
  }
  // [rows, used] -> [rows, kv], the new columns `allowed`.
  template <typename T>
  static void widen(const std::vector<T>& in, int64_t rows, int64_t used, int64_t kv, T allowed,
                    T* out) {
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(in.begin() + r * used, in.begin() + (r + 1) * used, out + r * kv);
      std::fill(out + r * kv + used, out + (r + 1) * kv, allowed);
    }
  }
  static Status build_bool_mask(const Params& p, uint8_t* out) {
    if (!p.static_cache) return cpu::build_bool_mask(p, out);
    const Shrunk s = by_used_length(p);
    std::vector<uint8_t> m(static_cast<size_t>(p.batch * p.q_len * s.used));
    if (Status st = cpu::build_bool_mask(s.p, m.data()); !st.ok()) return st;
    widen<uint8_t>(m, p.batch * p.q_len, s.used, p.kv_length, 1, out);
    return Status::Ok();
  }
  static Status build_additive_mask(const Params& p, AdditiveFill f, float* out) {
    if (!p.static_cache) return cpu::build_additive_mask(p, f, out);
    const Shrunk s = by_used_length(p);
    std::vector<float> m(static_cast<size_t>(p.batch * p.q_len * s.used));
    if (Status st = cpu::build_additive_mask(s.p, f, m.data()); !st.ok()) return st;
    widen<float>(m, p.batch * p.q_len, s.used, p.kv_length, 0.0f, out);
    return Status::Ok();
  }
  static Status mask_needed(const Params& p, bool* needed) {
    if (!p.static_cache) return cpu::mask_needed(p, needed);
    return cpu::mask_needed(by_used_length(p).p, needed);
  }
  static Status fully_masked_rows(const Params& p, uint8_t* out) {
    if (!p.static_cache) return cpu::fully_masked_rows(p, out);
    const Shrunk s = by_used_length(p);
    if (Status st = cpu::fully_masked_rows(s.p, out); !st.ok()) return st;
    if (p.kv_length > s.used) std::fill(out, out + p.batch * p.q_len, uint8_t{0});
    return Status::Ok();
  }
  static Status layer_masks(const std::vector<std::string>& types, const Params& p,
                            LayerMasks* out) {
    if (!p.static_cache) return cpu::layer_masks(types, p, out);
    const Shrunk s = by_used_length(p);
    if (Status st = cpu::layer_masks(types, s.p, out); !st.ok()) return st;
    for (kernels::LayerMask& m : out->masks) {
      if (m.kind != LayerMaskKind::kAttention) continue;
      std::vector<uint8_t> wide(static_cast<size_t>(p.batch * p.q_len * p.kv_length));
      widen<uint8_t>(m.mask, p.batch * p.q_len, s.used, p.kv_length, 1, wide.data());
      m.mask = std::move(wide);
    }
    return Status::Ok();
  }
};

template <typename Api>
class WrongMaskBackend : public Backend {
 public:
  WrongMaskBackend(std::string name, std::string description)
      : name_(std::move(name)), description_(std::move(description)) {}
  std::string name() const override { return name_; }
  std::string description() const override { return description_; }
  bool deliberately_wrong() const override { return true; }
  Support supports(const cases::Case& c) const override {
    if (is_mask_case(c)) return Support::Yes();
    return Support::No(name_ + " implements only mask, layers and segments");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    return run_mask_case_with<Api>(c, in, out);
  }

 private:
  std::string name_, description_;
};

}  // namespace

std::vector<std::unique_ptr<Backend>> make_wrong_mask_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<WrongMaskBackend<NoLinearRuleApi>>(
      "wrong:mask-no-linear-rule",
      "deliberately wrong: no mask rule for linear_attention layers (the static-cache KeyError)"));
  v.push_back(std::make_unique<WrongMaskBackend<OldLayerNamesApi>>(
      "wrong:mask-old-layer-names",
      "deliberately wrong: no mask rule for the renamed linear_attention_* layer types"));
  v.push_back(std::make_unique<WrongMaskBackend<IgnorePackingApi>>(
      "wrong:mask-ignore-packing",
      "deliberately wrong: ignores position_ids, packed sequences see each other"));
  v.push_back(std::make_unique<WrongMaskBackend<StaticByUsedLengthApi>>(
      "wrong:mask-static-by-used-length",
      "deliberately wrong: static-cache masks sized by the used length, unwritten slots visible"));
  return v;
}

}  // namespace deltacheck::backends
