// fork() in a process with threads copies every lock as it stands: a child of run_isolated()
// (harness/isolation.h) that reads HDF5 or allocates tensor storage would wait forever for a
// lock another thread held at the fork (HDF5's library-wide lock; the storage pool's). Code that
// holds such locks runs inside a NoForkSection; fork() is called inside a ForkSection, which
// waits until no other thread is in one. Sections nest within a thread.
// (A sanitizer's own allocator locks are beyond this guard: GCC 12's ASan has no fork handlers,
// docs/reliability.md, "Sanitizers and fork()".)
#pragma once

namespace deltacheck::cases {

class NoForkSection {
 public:
  NoForkSection();
  ~NoForkSection();
  NoForkSection(const NoForkSection&) = delete;
  NoForkSection& operator=(const NoForkSection&) = delete;
};

class ForkSection {
 public:
  ForkSection();   // waits for every other thread to leave its NoForkSection
  ~ForkSection();  // in the parent, after fork()
  // In the child, right after fork(): the child starts with the sections' lock free (the
  // destructor never runs there: the child ends in _exit()).
  void in_child();
  ForkSection(const ForkSection&) = delete;
  ForkSection& operator=(const ForkSection&) = delete;

 private:
  bool held_ = false;
};

}  // namespace deltacheck::cases
