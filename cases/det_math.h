// exp and log from +, -, *, / only, so the input generator's transcendental functions give the same
// bits on every platform (libm implementations differ in the last bit). Accurate to a few ulp;
// determinism, not the last ulp, is the point. Compiled without FMA contraction.
#pragma once

namespace deltacheck::cases {

double det_exp(double x);
double det_log(double x);  // x > 0
inline double det_sigmoid(double x) { return 1.0 / (1.0 + det_exp(-x)); }
// log(sigmoid(x)) = -softplus(-x), stable for large |x|.
double det_log_sigmoid(double x);

}  // namespace deltacheck::cases
