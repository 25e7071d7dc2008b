// deltacheck_serve_worker: a program for `--backend external`, in C++, that runs one of
// deltacheck's own backends (default cpu) on each case it is sent. It speaks both ways of the
// external protocol: given {in} and {out} it answers that one case (`--cmd`, golden/README.md);
// started by `--serve` (DELTACHECK_SERVE=1, no arguments) it answers every request of a run on
// stdin/stdout (docs/external.md). The tests and the benchmark use it as a worker whose own work
// is negligible; `--backend wrong:ignore-cu-seqlens` makes a leaky one.
//   deltacheck run --backend external --serve 'build/deltacheck_serve_worker --backend cpu'
//   deltacheck run --backend external --cmd 'build/deltacheck_serve_worker {in} {out}'
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include "backends/registry.h"
#include "cases/safe_text.h"
#include "golden/exchange.h"
#include "golden/format.h"
#include "harness/runner.h"

namespace {

using deltacheck::Status;
namespace golden = deltacheck::golden;
namespace harness = deltacheck::harness;
namespace backends = deltacheck::backends;

// Reads the case from {in}, runs the backend, writes {out} (declined cases: the reason as the
// root attribute "unsupported", which write_output_file does not write: answered as a line).
Status answer(harness::Backend& backend, const std::string& in, const std::string& out) {
  golden::FixtureReader reader;
  reader.set_check_inputs(false);  // a probe's inputs are not the generated ones
  if (Status st = reader.open(in); !st.ok()) return st;
  deltacheck::StatusOr<golden::FixtureCase> fc = reader.read(0);
  if (!fc.ok()) return fc.status();
  const harness::Support s = backend.supports(fc.value().c);
  if (!s.ok) return Status::Unsupported(s.reason);
  deltacheck::cases::TensorMap outputs = harness::allocate_outputs(fc.value().outputs);
  if (Status st = backend.run(fc.value().c, fc.value().inputs, outputs); !st.ok()) return st;
  return golden::write_output_file(out, outputs);
}

std::string one_line(const std::string& s) { return deltacheck::cases::printable_line(s, 300); }

}  // namespace

int main(int argc, char** argv) {
  std::string backend_name = "cpu", in, out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--backend" && i + 1 < argc) {
      backend_name = argv[++i];
    } else if (a.rfind("--", 0) != 0 && in.empty()) {
      in = a;
    } else if (a.rfind("--", 0) != 0 && out.empty()) {
      out = a;
    } else {
      std::fprintf(stderr, "usage: %s [--backend NAME] [{in} {out}]\n", argv[0]);
      return 2;
    }
  }
  std::unique_ptr<harness::Backend> backend;
  try {
    backend = backends::make_backend(backend_name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  const char* serve = std::getenv("DELTACHECK_SERVE");
  if (in.empty() && out.empty() && serve && std::strcmp(serve, "1") == 0) {
    // Serve mode: the handshake, then one answer line per request line.
    std::cout << "deltacheck-serve 1" << std::endl;
    std::string line;
    while (std::getline(std::cin, line)) {
      const size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
      if (line.compare(0, t1, "run") != 0 || t1 == std::string::npos || t2 == std::string::npos) {
        std::cout << "error malformed request" << std::endl;
        continue;
      }
      const Status st = answer(*backend, line.substr(t1 + 1, t2 - t1 - 1), line.substr(t2 + 1));
      if (st.ok())
        std::cout << "ok" << std::endl;
      else if (st.code() == deltacheck::StatusCode::kUnsupported)
        std::cout << "unsupported " << one_line(st.message()) << std::endl;
      else
        std::cout << "error " << one_line(st.message()) << std::endl;
    }
    return 0;
  }
  if (in.empty() || out.empty()) {
    std::fprintf(stderr, "%s: {in} and {out} are required (or run it with deltacheck's --serve)\n",
                 argv[0]);
    return 2;
  }
  const Status st = answer(*backend, in, out);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", one_line(st.message()).c_str());
    return 1;
  }
  return 0;
}
