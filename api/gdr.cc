// gdr cases as raw-buffer kernel calls, and backends made of one kernel function
// (include/deltacheck/gdr.h). The mapping is the one deltacheck's own CPU backend uses
// (ops/gdr/problem.h), so a user's kernel sees exactly the buffers deltacheck's kernels see.
#include "deltacheck/gdr.h"

#include <cmath>

#include "ops/gdr/problem.h"

namespace deltacheck {

GdrCall gdr_problem(const Case& c, const TensorMap& inputs, TensorMap& outputs) {
  GdrCall call;
  if (c.op() != "gdr") {
    call.status = Status::InvalidArgument("not a gdr case: " + c.id());
    return call;
  }
  const ops::gdr::Params d = ops::gdr::decode(c);
  if (d.pooled() || d.serving()) {
    call.status = Status::Unsupported(
        std::string("cache=") + ops::gdr::name(d.cache) +
        " keeps states in a slot-addressed pool, which a GdrProblem does not carry");
    return call;
  }
  const kernels::GatedDeltaRuleParams k = ops::gdr::kernel_params(d, inputs, outputs);
  GdrProblem& p = call.problem;
  p.batch = k.batch;
  p.seq_len = k.seq_len;
  p.num_heads = k.num_heads;
  p.num_value_heads = k.num_value_heads;
  p.key_dim = k.key_dim;
  p.value_dim = k.value_dim;
  p.dtype = (k.dtype);
  p.q = k.q;
  p.k = k.k;
  p.v = k.v;
  p.g = k.g;
  p.beta = k.beta;
  p.cu_seqlens = k.cu_seqlens;
  p.num_seqs = k.cu_seqlens ? k.num_seqs : k.batch;
  p.initial_state = k.initial_state;
  p.o = k.o;
  p.final_state = k.final_state;
  p.scale = k.scale > 0.0f ? k.scale : 1.0f / std::sqrt(static_cast<float>(k.key_dim));
  p.use_qk_l2norm = k.use_qk_l2norm;
  return call;
}

std::unique_ptr<FunctionBackend> gdr_backend(std::string name, GdrFunction kernel,
                                             GdrBackendOptions options) {
  auto supports = [name, dtypes = options.dtypes](const Case& c) -> Support {
    if (c.op() != "gdr") return Support::No(name + " runs the gdr op only");
    const ops::gdr::Params d = ops::gdr::decode(c);
    if (d.pooled() || d.serving())
      return Support::No(std::string("cache=") + ops::gdr::name(d.cache) +
                         ": state pools are not part of a GdrProblem");
    for (DType t : dtypes)
      if (d.dtype == t) return Support::Yes();
    return Support::No(name + " does not take dtype " + cases::dtype_name(d.dtype));
  };
  auto run = [kernel = std::move(kernel)](const Case& c, const TensorMap& inputs,
                                          TensorMap& outputs) -> Status {
    const GdrCall call = gdr_problem(c, inputs, outputs);
    if (!call.status.ok()) return call.status;
    return kernel(call.problem);
  };
  auto backend =
      std::make_unique<FunctionBackend>(std::move(name), std::move(run), std::move(supports));
  backend->set_description(options.description).set_deterministic(options.deterministic);
  return backend;
}

}  // namespace deltacheck
