// The kernel of the README's C++ route ("Check your own kernel"): the part a user brings. The
// docs test (tests/docs/check_docs.py, group cpp) puts it beside the README's CMakeLists.txt and
// my_kernel_test.cc and builds them against an install of this tree.
#pragma once

#include <deltacheck/gdr.h>

// The gated delta rule's token recurrence, fp32 only; false for anything else.
bool my_gated_delta_rule(const deltacheck::GdrProblem& p);
