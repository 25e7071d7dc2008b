// The one list of operations. Each entry is one operation's whole definition: its case-id schema,
// input generator and suite entries (cases::OpDefinition, from ops/<op>/case.cc) and the Operation
// the harness judges it with (ops/<op>/operation.cc). Adding an operation adds a folder under
// ops/ and one line in ops/registry.cc.
#pragma once

#include <string>
#include <vector>

#include "cases/op.h"
#include "ops/operation.h"

namespace deltacheck::ops {

struct RegisteredOp {
  cases::OpDefinition definition;
  const Operation* operation;
};

const std::vector<RegisteredOp>& registry();

// The registry entry of operation `op` (a name a user may type); InvalidArgument listing the known
// ones.
StatusOr<const RegisteredOp*> find(const std::string& op);

}  // namespace deltacheck::ops
