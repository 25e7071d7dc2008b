// The expectation cache's secret key (harness/expectation_cache.h): 32 random bytes in a file of
// the user's own, kept OUTSIDE the cache directory, so that a cache folder someone planted,
// copied or restored cannot carry a key that works. Entries are encrypted and authenticated with
// it; whoever can read this file can forge entries and read expectations (a candidate that can
// run deltacheck itself can compute them anyway: a competition must sandbox the candidate,
// docs/reliability.md).
//
// Where: DELTACHECK_CACHE_KEY_FILE, else $XDG_STATE_HOME/deltacheck/cache.key, else
// $HOME/.local/state/deltacheck/cache.key. Made on first use (its folder 0700, the file 0600,
// written under a temporary name and linked into place, so two runs racing both end up with the
// winner's key); refused when it is not a regular file of the current user without group or
// other permissions, or not exactly 32 bytes.
#pragma once

#include <array>
#include <string>

#include "core/status.h"

namespace deltacheck::harness {

struct CacheKey {
  static constexpr size_t kBytes = 32;
  std::array<unsigned char, kBytes> bytes{};
};

// The key file a cache uses (see above); an error when neither the variables nor HOME say.
StatusOr<std::string> default_cache_key_file();

// The key in `path`, made first when there is none. Errors are one line naming the file and the
// rule it breaks ("cache key file '/x/cache.key': mode 0644 lets others read it: ...").
StatusOr<CacheKey> open_cache_key(const std::string& path);

}  // namespace deltacheck::harness
