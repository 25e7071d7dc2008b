// Sections that must not be forked in the middle of (cases/fork_guard.h).
#include "cases/fork_guard.h"

#include <new>
#include <shared_mutex>

namespace deltacheck::cases {
namespace {

// Never destroyed (sections run from static destructors too); re-created in a forked child.
std::shared_mutex& sections() {
  static std::shared_mutex* m = new std::shared_mutex;
  return *m;
}

// This thread's depth of NoForkSections: only the outermost takes the shared lock, so nesting
// never waits behind a ForkSection queued in between.
thread_local int t_depth = 0;

}  // namespace

NoForkSection::NoForkSection() {
  if (t_depth++ == 0) sections().lock_shared();
}

NoForkSection::~NoForkSection() {
  if (--t_depth == 0) sections().unlock_shared();
}

// A thread forking from inside a NoForkSection cannot wait for itself: it forks as it is (no
// deltacheck code does; the guard keeps such a caller from deadlocking).
ForkSection::ForkSection() : held_(t_depth == 0) {
  if (held_) sections().lock();
}

ForkSection::~ForkSection() {
  if (held_) sections().unlock();
}

void ForkSection::in_child() {
  // The child is this one thread: no section is open, whatever the parent's threads were in.
  if (held_) new (&sections()) std::shared_mutex;
  held_ = false;
}

}  // namespace deltacheck::cases
