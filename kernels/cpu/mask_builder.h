// CPU mask builder: the attention masks built row by row from allowed key intervals, plus the
// per-layer-type mapping and the segment derivations. Raw buffers in and out. The contract (types,
// semantics, what each function returns) is kernels/common/mask_params.h; the reference judges this
// builder bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/common/mask_builder_api.h"
#include "kernels/common/mask_params.h"

namespace deltacheck::kernels::cpu {

DELTACHECK_MASK_BUILDER_FUNCTIONS;

}  // namespace deltacheck::kernels::cpu
