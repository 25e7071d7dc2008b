// A host mask builder (kernels/common/mask_params.h) as a type: DELTACHECK_MASK_BUILDER_API(Name,
// ns) defines struct Name whose static functions forward to the builder functions of namespace
// `ns`, so code over every builder (the harness's adapter, backends/mask_adapter.h; the shared
// tests, tests/kernels/mask_builder_testbed.h) is written once as a template. A deliberately wrong
// builder derives from such a struct and hides the function it breaks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/common/mask_params.h"

// The functions every host mask builder defines in its own namespace (kernels::cpu,
// kernels::torch), declared once: the contract of each is kernels/common/mask_params.h.
#define DELTACHECK_MASK_BUILDER_FUNCTIONS                                                          \
  ::deltacheck::Status validate(const ::deltacheck::kernels::MaskParams& p);                       \
  ::deltacheck::Status build_bool_mask(const ::deltacheck::kernels::MaskParams& p, uint8_t* out);  \
  ::deltacheck::Status build_additive_mask(const ::deltacheck::kernels::MaskParams& p,             \
                                           ::deltacheck::kernels::AdditiveFill fill, float* out);  \
  ::deltacheck::Status mask_needed(const ::deltacheck::kernels::MaskParams& p, bool* needed);      \
  ::deltacheck::Status fully_masked_rows(const ::deltacheck::kernels::MaskParams& p,               \
                                         uint8_t* out);                                            \
  ::deltacheck::Status token_validity(const ::deltacheck::kernels::MaskParams& p, uint8_t* out);   \
  ::deltacheck::Status layer_masks(const std::vector<std::string>& layer_types,                    \
                                   const ::deltacheck::kernels::MaskParams& p,                     \
                                   ::deltacheck::kernels::LayerMasks* out);                        \
  ::deltacheck::Status sequence_index_from_cu_seqlens(const int64_t* cu_seqlens, int64_t num_seqs, \
                                                      int64_t* out);                               \
  ::deltacheck::Status segments_from_position_ids(const int64_t* position_ids, int64_t batch,      \
                                                  int64_t len,                                     \
                                                  ::deltacheck::kernels::PackedSegments* out);     \
  ::deltacheck::Status unpad(const uint8_t* padding_mask, int64_t batch, int64_t len,              \
                             ::deltacheck::kernels::Unpadded* out)

#define DELTACHECK_MASK_BUILDER_API(Name, ns)                                                   \
  struct Name {                                                                                 \
    using Params = ::deltacheck::kernels::MaskParams; /* the contract's types, for derived */   \
    using AdditiveFill = ::deltacheck::kernels::AdditiveFill; /* (wrong) builders */            \
    using LayerMaskKind = ::deltacheck::kernels::LayerMaskKind;                                 \
    using LayerMasks = ::deltacheck::kernels::LayerMasks;                                       \
    using PackedSegments = ::deltacheck::kernels::PackedSegments;                               \
    using Unpadded = ::deltacheck::kernels::Unpadded;                                           \
    static ::deltacheck::Status validate(const ::deltacheck::kernels::MaskParams& p) {          \
      return ns::validate(p);                                                                   \
    }                                                                                           \
    static ::deltacheck::Status build_bool_mask(const ::deltacheck::kernels::MaskParams& p,     \
                                                uint8_t* out) {                                 \
      return ns::build_bool_mask(p, out);                                                       \
    }                                                                                           \
    static ::deltacheck::Status build_additive_mask(const ::deltacheck::kernels::MaskParams& p, \
                                                    ::deltacheck::kernels::AdditiveFill f,      \
                                                    float* out) {                               \
      return ns::build_additive_mask(p, f, out);                                                \
    }                                                                                           \
    static ::deltacheck::Status mask_needed(const ::deltacheck::kernels::MaskParams& p,         \
                                            bool* needed) {                                     \
      return ns::mask_needed(p, needed);                                                        \
    }                                                                                           \
    static ::deltacheck::Status fully_masked_rows(const ::deltacheck::kernels::MaskParams& p,   \
                                                  uint8_t* out) {                               \
      return ns::fully_masked_rows(p, out);                                                     \
    }                                                                                           \
    static ::deltacheck::Status token_validity(const ::deltacheck::kernels::MaskParams& p,      \
                                               uint8_t* out) {                                  \
      return ns::token_validity(p, out);                                                        \
    }                                                                                           \
    static ::deltacheck::Status layer_masks(const std::vector<std::string>& types,              \
                                            const ::deltacheck::kernels::MaskParams& p,         \
                                            ::deltacheck::kernels::LayerMasks* out) {           \
      return ns::layer_masks(types, p, out);                                                    \
    }                                                                                           \
    static ::deltacheck::Status segments_from_position_ids(                                     \
        const int64_t* pos, int64_t batch, int64_t len,                                         \
        ::deltacheck::kernels::PackedSegments* out) {                                           \
      return ns::segments_from_position_ids(pos, batch, len, out);                              \
    }                                                                                           \
    static ::deltacheck::Status unpad(const uint8_t* padding, int64_t batch, int64_t len,       \
                                      ::deltacheck::kernels::Unpadded* out) {                   \
      return ns::unpad(padding, batch, len, out);                                               \
    }                                                                                           \
    static ::deltacheck::Status sequence_index_from_cu_seqlens(const int64_t* cu, int64_t n,    \
                                                               int64_t* out) {                  \
      return ns::sequence_index_from_cu_seqlens(cu, n, out);                                    \
    }                                                                                           \
  }
