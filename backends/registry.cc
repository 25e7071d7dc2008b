// The backend registry: names -> factories, in listing order. Built-in backends are listed here;
// optional ones (LibTorch, CUDA), compiled into their own libraries, add their factories with
// register_backend_factory() before the registry is first used.
#include <stdexcept>

#include "backends/backends.h"

namespace deltacheck::backends {
namespace {

std::vector<BackendFactory>& extra_factories() {
  static std::vector<BackendFactory> f;
  return f;
}

std::vector<std::unique_ptr<Backend>> all_backends(const BackendOptions& options) {
  std::vector<std::unique_ptr<Backend>> v;
  v.push_back(make_cpu_backend());
  for (const BackendFactory& f : extra_factories())
    for (auto& b : f(options)) v.push_back(std::move(b));
  v.push_back(make_external_backend(options));
  // Deliberately correct, independent formulations (the false-positive panel).
  for (auto& b : make_right_backends()) v.push_back(std::move(b));
  for (auto& b : make_wrong_backends()) v.push_back(std::move(b));
  for (auto& b : make_wrong_crash_backends()) v.push_back(std::move(b));
  return v;
}

}  // namespace

void register_backend_factory(BackendFactory factory) {
  extra_factories().push_back(std::move(factory));
}

std::vector<BackendInfo> list_backends() {
  std::vector<BackendInfo> out;
  for (const auto& b : all_backends({}))
    out.push_back(
        {b->name(), b->description(), b->deliberately_wrong(), b->deliberately_correct()});
  return out;
}

std::unique_ptr<Backend> make_backend(const std::string& name, const BackendOptions& options) {
  // The error names the backends a user runs and counts the panels (dozens of wrong:* names
  // would make the line unreadable; `deltacheck list backends` lists them).
  std::string known;
  int right = 0, wrong = 0;
  for (auto& b : all_backends(options)) {
    if (b->name() == name) return std::move(b);
    if (b->deliberately_wrong())
      ++wrong;
    else if (b->deliberately_correct())
      ++right;
    else
      known += (known.empty() ? "" : ", ") + b->name();
  }
  throw std::invalid_argument("unknown backend '" + name + "' (known: " + known + "; " +
                              std::to_string(right) + " right:* and " + std::to_string(wrong) +
                              " wrong:* backends, listed by 'deltacheck list backends')");
}

}  // namespace deltacheck::backends
