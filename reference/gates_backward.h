// The backward of the gates (reference/gates.h) in FP64. With x = a + dt_bias[h]:
//   g = -exp(A_log[h]) * softplus(x):  dg/da = dg/ddt_bias = -exp(A_log[h]) * sigmoid(x),
//                                      dg/dA_log = g
//   beta = sigmoid(b):                 dbeta/db = sigmoid(b) * sigmoid(-b)
// Every factor is formed directly, never as a difference, so the gradients keep their digits for
// any decay (sigmoid(-b), not 1 - sigmoid(b), when beta is close to 1).
#pragma once

#include <vector>

#include "reference/gates.h"

namespace deltacheck::reference {

struct GatesGradients {
  std::vector<double> da;        // [T, HV]
  std::vector<double> db;        // [T, HV]
  std::vector<double> dA_log;    // [HV], summed over the tokens
  std::vector<double> ddt_bias;  // [HV], summed over the tokens
};

// dg, dbeta: [T, HV], both required. Throws std::invalid_argument when the problem is not valid.
GatesGradients gates_backward(const GatesArgs& args, const double* dg, const double* dbeta);

}  // namespace deltacheck::reference
