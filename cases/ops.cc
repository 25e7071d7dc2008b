// The schemas of the registered operations (ops/registry.cc lists them) and the suite builder.
#include "cases/op.h"

namespace deltacheck::cases {

const std::vector<OpSchema>& op_schemas() {
  static const std::vector<OpSchema> schemas = [] {
    std::vector<OpSchema> s;
    for (const OpDefinition& d : op_definitions()) s.push_back(d.schema);
    return s;
  }();
  return schemas;
}

const OpDefinition& find_op(const std::string& op) {
  for (const OpDefinition& d : op_definitions())
    if (d.schema.op == op) return d;
  find_schema(op);  // throws the error that lists the known operations
  throw CaseIdError("unknown operation '" + op + "'");
}

void SuiteBuilder::add(const std::string& op, const Params& p) {
  Case c(op, p);
  if (seen_.insert(c.id()).second) cases_.push_back(c);
}

Params merge(Params base, const Params& over) {
  for (const auto& [k, v] : over) {
    bool found = false;
    for (auto& kv : base)
      if (kv.first == k) kv.second = v, found = true;
    if (!found) base.emplace_back(k, v);
  }
  return base;
}

}  // namespace deltacheck::cases
