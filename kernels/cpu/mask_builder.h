// CPU mask builder: the attention masks built row by row from allowed key intervals, plus the
// per-layer-type mapping and the segment derivations. Raw buffers in and out. The contract (types,
// semantics, what each function returns) is kernels/common/mask_params.h; the reference judges this
// builder bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/common/mask_params.h"

namespace deltacheck::kernels::cpu {

Status validate(const MaskParams& p);
Status build_bool_mask(const MaskParams& p, uint8_t* out);
Status build_additive_mask(const MaskParams& p, AdditiveFill fill, float* out);
Status mask_needed(const MaskParams& p, bool* needed);
Status fully_masked_rows(const MaskParams& p, uint8_t* out);
Status token_validity(const MaskParams& p, uint8_t* out);
Status layer_masks(const std::vector<std::string>& layer_types, const MaskParams& p,
                   LayerMasks* out);
Status sequence_index_from_cu_seqlens(const int64_t* cu_seqlens, int64_t num_seqs, int64_t* out);
Status segments_from_position_ids(const int64_t* position_ids, int64_t batch, int64_t len,
                                  PackedSegments* out);
Status unpad(const uint8_t* padding_mask, int64_t batch, int64_t len, Unpadded* out);

}  // namespace deltacheck::kernels::cpu
