// LibTorch mask builder: the attention masks built with ATen tensor ops the way Python
// frameworks build them (arange comparisons broadcast to [B, 1, q, kv], combined with &,
// masked_fill for the additive form), then copied to raw buffers. The contract (types, semantics,
// what each function returns) is kernels/common/mask_params.h, the same as the CPU builder's, so
// the harness compares both to the reference bit for bit.
//
// The header is free of LibTorch includes; errors thrown inside ATen come back as kInternal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/common/mask_builder_api.h"
#include "kernels/common/mask_params.h"

namespace deltacheck::kernels::torch {

DELTACHECK_MASK_BUILDER_FUNCTIONS;

}  // namespace deltacheck::kernels::torch
