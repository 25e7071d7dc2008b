// An ssd case's tensors in the raw form kernels take (kernels/common/ssd_params.h).
#pragma once

#include "cases/case.h"
#include "cases/tensor.h"
#include "kernels/common/ssd_params.h"
#include "ops/ssd/params.h"

namespace deltacheck::ops::ssd {

// Kernel parameters pointing into `inputs` and `outputs` (y, and final_state when the case keeps
// it; cu_seqlens and num_seqs from its tensor). The caller may adjust fields (the deliberately
// wrong backends do).
kernels::SsdParams kernel_params(const Params& d, const cases::TensorMap& inputs,
                                 cases::TensorMap& outputs);

}  // namespace deltacheck::ops::ssd
