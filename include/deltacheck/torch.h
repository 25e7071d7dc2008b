// The LibTorch component (find_package(deltacheck COMPONENTS torch), target deltacheck::torch):
// deltacheck's LibTorch backends, "torch" (its ATen kernels, on --device cpu or cuda) and
// "torch-op" (your TORCH_LIBRARY operator, loaded from a shared library; BackendOptions::library
// and ::op; backends/torch/README.md has the calling convention).
#pragma once

namespace deltacheck {

// Makes "torch" and "torch-op" known to make_backend() and list_backends(); later calls do
// nothing. Call it once before make_backend("torch").
void register_torch_backends();

}  // namespace deltacheck
