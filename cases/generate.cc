// Input generation, dispatched to the operation's generator.
#include "cases/generate.h"

namespace deltacheck::cases {

TensorMap generate_inputs(const Case& c, const GenOptions& options) {
  const OpDefinition& d = find_op(c.op());
  if (!d.generate) throw CaseIdError("no input generator for operation '" + c.op() + "'");
  return d.generate(c, options);
}

int64_t estimate_input_bytes(const Case& c) {
  const OpDefinition& d = find_op(c.op());
  return d.input_bytes ? d.input_bytes(c) : 0;
}

}  // namespace deltacheck::cases
