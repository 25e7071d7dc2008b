// Which harness operation serves which case op (one line per operation).
#include <stdexcept>

#include "harness/operation.h"

namespace deltacheck::harness {

const Operation& operation_for(const cases::Case& c) {
  if (c.op() == "gdr") return gdr_operation();
  if (c.op() == "layer") return layer_operation();
  if (c.op() == "mask" || c.op() == "layers" || c.op() == "segments") return mask_operation();
  throw std::invalid_argument("no harness operation for '" + c.op() + "'");
}

}  // namespace deltacheck::harness
