// The LibTorch mask builder against the reference, bit for bit: the shared testbed
// (tests/kernels/mask_builder_testbed.h).
#include "kernels/torch/mask_builder.h"
#include "tests/kernels/mask_builder_testbed.h"

namespace deltacheck::testbed {
namespace {

DELTACHECK_MASK_BUILDER_API(TorchApi, kernels::torch);
struct TorchBuilder : TorchApi {
  static constexpr int kSweep = 400;
};
INSTANTIATE_TYPED_TEST_SUITE_P(Torch, MaskBuilderTest, TorchBuilder);

}  // namespace
}  // namespace deltacheck::testbed
