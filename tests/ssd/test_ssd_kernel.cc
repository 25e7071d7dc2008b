// The CPU SSD kernel against the FP64 reference: the chunked form at several chunk sizes and the
// one-token state update, in every dtype, with packed sequences, groups, gate, skip and clamp.
#include <gtest/gtest.h>

#include <cmath>

#include "cases/case.h"
#include "cases/op.h"
#include "kernels/cpu/ssd.h"
#include "ops/operation.h"
#include "ops/ssd/params.h"
#include "ops/ssd/problem.h"

namespace deltacheck {
namespace {

using cases::Case;

double rel(const cases::Tensor& t, const std::vector<double>& ref) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    num += (t.get(i) - ref[i]) * (t.get(i) - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

struct Errors {
  double y, state;
};

Errors run(const std::string& id, int64_t chunk, bool update) {
  const Case c = Case::parse(id);
  const ops::ssd::Params d = ops::ssd::decode(c);
  const cases::TensorMap in = cases::find_op("ssd").generate(c, {});
  cases::TensorMap out;
  out.add(cases::Tensor("y", d.dtype, {d.B, d.T, d.H, d.P}));
  out.add(cases::Tensor("final_state", cases::DType::kF32, {d.seqs, d.H, d.P, d.N}));
  kernels::SsdParams p = ops::ssd::kernel_params(d, in, out);
  p.chunk_size = chunk;
  const Status st = update ? kernels::cpu::ssd_state_update(p) : kernels::cpu::chunked_ssd(p);
  EXPECT_TRUE(st.ok()) << st.message();
  const ops::Values ref = ops::ssd::operation().oracle(c, in);
  return {rel(out.at("y"), ref.at("y")), rel(out.at("final_state"), ref.at("final_state"))};
}

TEST(SsdCpuKernel, ChunkedMatchesTheReference) {
  for (const char* id : {"ssd(layout=packed[255,0,257,64],seed=11)",
                         "ssd(layout=packed[1,513,0,3],H=8,G=2,z=1,dt_limit=on,seed=12)",
                         "ssd(layout=packed[300,0,40],decay=strong,state=mixed,seed=13)",
                         "ssd(layout=batch[2x300],decay=weak,D=0,G=4,H=4,P=20,N=12,seed=14)"})
    for (int64_t chunk : {1, 5, 64, 256}) {
      const Errors r = run(id, chunk, false);
      EXPECT_LT(r.y, 2e-5) << id << " chunk " << chunk;
      EXPECT_LT(r.state, 2e-5) << id << " chunk " << chunk;
    }
  for (const char* dt : {"bf16", "fp16"}) {
    const Errors r =
        run(std::string("ssd(layout=packed[63,0,257],z=1,dtype=") + dt + ",seed=15)", 64, false);
    EXPECT_LT(r.y, 1e-2) << dt;  // y stored in the dtype
    EXPECT_LT(r.state, 1e-5) << dt;
  }
}

TEST(SsdCpuKernel, StateUpdateMatchesTheReference) {
  for (const char* id : {"ssd(layout=packed[1*8],cache=decode,seed=16)",
                         "ssd(layout=packed[1*8],cache=decode,z=1,dt_limit=on,G=4,seed=17)",
                         "ssd(layout=packed[37,0,5],seed=18)"}) {
    const Errors r = run(id, 64, true);
    EXPECT_LT(r.y, 2e-5) << id;
    EXPECT_LT(r.state, 2e-5) << id;
  }
}

TEST(SsdCpuKernel, RefusesABadProblemWithAClearError) {
  kernels::SsdParams p;
  p.num_heads = 3;
  p.num_groups = 2;
  p.head_dim = p.state_dim = 4;
  const Status st = kernels::cpu::chunked_ssd(p);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "H % G != 0");
}

}  // namespace
}  // namespace deltacheck
