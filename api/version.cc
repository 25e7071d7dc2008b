// The library's version, compiled in from the same generated header users include.
#include "deltacheck/version.h"

namespace deltacheck {

const char* version() { return DELTACHECK_VERSION_STRING; }

}  // namespace deltacheck
