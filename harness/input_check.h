// The check that a backend left its inputs as they were: a copy of their bytes taken before the
// call, compared after it. For backends whose code the runner cannot hold to a const reference
// (Backend::checks_inputs(): a Python callable, a user's function through a raw pointer); a
// change is the verdict error, naming the input and its first changed element.
//
// The copy can be taken where the inputs are built (the case's own inputs when the case is
// prepared, each probe variation when its setup is built), so that with prepare_ahead it is made
// on the preparing thread, while the previous call runs, and only the comparison remains on the
// call's path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cases/tensor.h"

namespace deltacheck::harness {

class InputCopy {
 public:
  explicit InputCopy(const cases::TensorMap& inputs);
  // "" when every input holds the bytes it held when copied, else "wrote into its input 'q'
  // (element 707 of 16384 changed; inputs are read-only)". `inputs` must be the map copied (the
  // same tensors in the same order); a different one is reported as changed.
  std::string changed(const cases::TensorMap& inputs) const;

 private:
  std::unique_ptr<uint8_t[]> bytes_;  // not zero-filled first: every byte is copied into
  std::vector<size_t> sizes_;
};

}  // namespace deltacheck::harness
