// Mapping of ssd cases onto kernel parameters.
#include "ops/ssd/problem.h"

namespace deltacheck::ops::ssd {

kernels::SsdParams kernel_params(const Params& d, const cases::TensorMap& in,
                                 cases::TensorMap& out) {
  auto f32 = [&](const char* name) -> const float* {
    const cases::Tensor* t = in.find(name);
    return t ? t->as<float>() : nullptr;
  };
  kernels::SsdParams p;
  p.batch = d.B;
  p.seq_len = d.T;
  p.num_heads = d.H;
  p.head_dim = d.P;
  p.num_groups = d.G;
  p.state_dim = d.N;
  p.dtype = cases::kernel_dtype(d.dtype);
  p.x = in.at("x").data();
  p.dt = in.at("dt").data();
  p.B = in.at("B").data();
  p.C = in.at("C").data();
  if (const cases::Tensor* z = in.find("z")) p.z = z->data();
  p.dt_bias = f32("dt_bias");
  p.A = f32("A");
  p.D = f32("D");
  p.dt_min = static_cast<float>(d.dt_min());
  p.dt_max = static_cast<float>(d.dt_max());
  if (cases::Tensor* y = out.find("y")) p.y = y->data();
  if (const cases::Tensor* cu = in.find("cu_seqlens")) {
    p.cu_seqlens = cu->as<int64_t>();
    p.num_seqs = cu->numel() - 1;
  }
  p.initial_state = f32("initial_state");
  if (cases::Tensor* fs = out.find("final_state")) p.final_state = fs->as<float>();
  return p;
}

}  // namespace deltacheck::ops::ssd
