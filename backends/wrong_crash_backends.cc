// Deliberately crashing backends, which prove that --isolate contains what a broken kernel does
// to the process (docs/reliability.md). Each is the cpu backend except on some cases:
//   wrong:segfault  dies of SIGSEGV on cases with a zero-length sequence
//   wrong:hang      never returns on one-token decode cases (cache=decode)
// Outside an isolated child process they decline every case (unsupported: "run it with
// --isolate"), so that listing or sweeping the wrong backends never takes deltacheck down.
#include <signal.h>

#include <chrono>
#include <thread>

#include "backends/backends.h"
#include "harness/isolation.h"
#include "ops/gdr/params.h"

namespace deltacheck::backends {
namespace {

class CrashingBackend : public Backend {
 public:
  CrashingBackend(std::string name, std::string description, bool (*fatal)(const cases::Case&),
                  void (*die)())
      : name_(std::move(name)), description_(std::move(description)), fatal_(fatal), die_(die) {}
  std::string name() const override { return name_; }
  std::string description() const override { return description_; }
  bool deliberately_wrong() const override { return true; }
  Support supports(const cases::Case& c) const override {
    return c.op() == "gdr" ? Support::Yes() : Support::No("gdr cases only");
  }
  Status run(const cases::Case& c, const cases::TensorMap& in, cases::TensorMap& out) override {
    if (!in_isolated_child())
      return Status::Unsupported(name_ + " crashes on purpose: run it with --isolate");
    if (fatal_(c)) die_();
    return run_cpu_gdr_case(c, in, out);
  }

 private:
  std::string name_, description_;
  bool (*fatal_)(const cases::Case&);
  void (*die_)();
};

bool has_empty_sequence(const cases::Case& c) {
  for (int64_t l : c.layout().lengths)
    if (l == 0) return true;
  return false;
}

}  // namespace

std::vector<std::unique_ptr<Backend>> make_wrong_crash_backends() {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(std::make_unique<CrashingBackend>(
      "wrong:segfault", "segfaults on cases with a zero-length sequence (needs --isolate)",
      has_empty_sequence, [] { raise(SIGSEGV); }));
  v.push_back(std::make_unique<CrashingBackend>(
      "wrong:hang", "never returns on one-token decode cases (needs --isolate)",
      [](const cases::Case& c) {
        return c.op() == "gdr" && ops::gdr::decode(c).cache == ops::gdr::Cache::kDecode;
      },
      [] {
        for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
      }));
  return v;
}

}  // namespace deltacheck::backends
