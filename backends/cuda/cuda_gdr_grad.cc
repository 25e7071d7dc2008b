// The cuda backend's gdr_grad cases: the CUDA backward (kernels/cuda/gated_delta_rule_backward.h)
// on device copies of the case's tensors, as the cpu backend runs the CPU backward on the host
// ones (cpu_gdr_grad.cc). A cp case reaches run() as its two ranks' plain calls (ops/gdr_grad/
// context_parallel.h), each through here.
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device_tensors.h"
#include "kernels/cuda/gated_delta_rule_backward.h"
#include "ops/gdr_grad/problem.h"

namespace deltacheck::backends {

Status run_cuda_gdr_grad_case(const cases::Case& c, const cases::TensorMap& in,
                              cases::TensorMap& out) {
  const ops::gdr_grad::Params p = ops::gdr_grad::decode(c);
  return cuda_backend::run_on_device(
      in, out,
      [&](const cuda_backend::DeviceTensors& din, const cuda_backend::DeviceTensors& dout,
          cudaStream_t stream) {
        return kernels::cuda::recurrent_gated_delta_rule_backward(
            ops::gdr_grad::kernel_params(p, din, dout), stream);
      });
}

}  // namespace deltacheck::backends
