// Facts about gdr cases that both the generator and the harness need.
#pragma once

#include <cstdint>
#include <vector>

#include "cases/case.h"

namespace deltacheck::cases {

// cache=pool / spec: rows of the state pool, and each sequence's slot (-1: padding entry).
int64_t gdr_pool_size(const Case& c);
std::vector<int32_t> gdr_pool_slots(const Case& c);

}  // namespace deltacheck::cases
