// Backends from optional libraries, registered when this build has them.
#include "harness/cli/commands.h"

namespace deltacheck::cli {

void register_optional_backends() {}

}  // namespace deltacheck::cli
