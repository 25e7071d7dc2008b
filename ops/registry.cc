// The list of operations (one line per op): schema, generator and suite entries, and Operation.
#include "ops/registry.h"

#include <stdexcept>

#include "ops/gdr/params.h"
#include "ops/gdr_grad/params.h"
#include "ops/layer/params.h"
#include "ops/layer_grad/params.h"
#include "ops/mask/params.h"
#include "ops/serve/params.h"
#include "ops/ssd/params.h"

namespace deltacheck::ops {

const std::vector<RegisteredOp>& registry() {
  static const std::vector<RegisteredOp> ops{
      {gdr::definition(), &gdr::operation()},
      {gdr_grad::definition(), &gdr_grad::operation()},
      {layer::definition(), &layer::operation()},
      {layer_grad::definition(), &layer_grad::operation()},
      {mask::mask_definition(), &mask::operation()},
      {mask::layers_definition(), &mask::operation()},
      {mask::segments_definition(), &mask::operation()},
      {serve::definition(), &serve::operation()},
      {ssd::definition(), &ssd::operation()},
  };
  return ops;
}

StatusOr<const RegisteredOp*> find(const std::string& op) {
  for (const RegisteredOp& r : registry())
    if (r.definition.schema.op == op) return &r;
  // The case model's schemas are the registry's: lookup_schema fails too, listing the known ops.
  const StatusOr<const cases::OpSchema*> schema = cases::lookup_schema(op);
  return schema.ok() ? Status::Internal("operation '" + op + "' has a schema but no entry")
                     : schema.status();
}

const Operation& operation_for(const cases::Case& c) {
  for (const RegisteredOp& r : registry())
    if (r.definition.schema.op == c.op()) return *r.operation;
  // A case exists only for an op of the registry (its schema came from here): a precondition.
  throw std::invalid_argument("no operation '" + c.op() + "'");
}

}  // namespace deltacheck::ops

namespace deltacheck::cases {

// Declared in cases/op.h: the case model's view of the registry.
const std::vector<OpDefinition>& op_definitions() {
  static const std::vector<OpDefinition> defs = [] {
    std::vector<OpDefinition> d;
    for (const ops::RegisteredOp& r : ops::registry()) d.push_back(r.definition);
    return d;
  }();
  return defs;
}

}  // namespace deltacheck::cases
