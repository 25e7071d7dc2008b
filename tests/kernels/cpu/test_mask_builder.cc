// The CPU mask builder against the reference, bit for bit: the shared testbed
// (tests/kernels/mask_builder_testbed.h).
#include "kernels/cpu/mask_builder.h"
#include "tests/kernels/mask_builder_testbed.h"

namespace deltacheck::testbed {
namespace {

DELTACHECK_MASK_BUILDER_API(CpuApi, kernels::cpu);
struct CpuBuilder : CpuApi {
  static constexpr int kSweep = 600;
};
INSTANTIATE_TYPED_TEST_SUITE_P(Cpu, MaskBuilderTest, CpuBuilder);

}  // namespace
}  // namespace deltacheck::testbed
