// Fuzz target: the inputs of `deltacheck report merge` (reports/report.h, reports/report_dir.h):
// two report.json texts (split at the first NUL byte) are parsed, merged and written in every
// format, and every failure dump they name is resolved against a report folder that holds a
// dump, a link out of the folder and a folder link. Invariants, beyond no crash, no exception
// escaping and no undefined behaviour:
//   - a dump path resolves only to a regular file inside the report's folder;
//   - report.json written from any accepted input parses back to the same report.json.
#include <fuzzer/FuzzedDataProvider.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "reports/report.h"
#include "reports/report_dir.h"

namespace {

namespace fs = std::filesystem;
using deltacheck::Status;
namespace reports = deltacheck::reports;

// A report folder with failures/: a real dump, a dump name linking out of the folder, and a
// folder link; in $DELTACHECK_FUZZ_SCRATCH (scripts/fuzz.sh), else the temporary folder.
const fs::path& report_folder() {
  static const fs::path dir = [] {
    const char* scratch = std::getenv("DELTACHECK_FUZZ_SCRATCH");
    const fs::path base = scratch ? fs::path(scratch) : fs::temp_directory_path();
    const fs::path d = base / ("deltacheck-fuzz-report-" + std::to_string(getpid()));
    fs::remove_all(d);
    fs::create_directories(d / "failures");
    fs::create_directories(base / "outside");
    std::ofstream(d / "failures/gdr-cpu-0123456789abcdef.h5") << "dump";
    std::ofstream(base / "outside/secret") << "secret";
    fs::create_symlink(base / "outside/secret", d / "failures/gdr-x-0123456789abcdee.h5");
    fs::create_directory_symlink(base / "outside", d / "failures/gdr-y-0123456789abcded.h5");
    std::atexit([] { fs::remove_all(report_folder()); });
    return d;
  }();
  return dir;
}

bool inside(const fs::path& root, const fs::path& p) {
  const fs::path r = fs::canonical(root), q = fs::canonical(p);
  auto [a, b] = std::mismatch(r.begin(), r.end(), q.begin(), q.end());
  return a == r.end() && fs::is_regular_file(q);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  std::vector<std::string> texts{all.substr(0, nul)};
  if (nul != std::string::npos) texts.push_back(all.substr(nul + 1));
  std::vector<reports::Report> loaded;
  for (const std::string& t : texts) {
    reports::LoadedReport lr = reports::parse_json(t, "input");
    if (!lr.status.ok()) return 0;
    loaded.push_back(std::move(lr.report));
  }
  for (const reports::Report& r : loaded)
    for (const reports::Entry& e : r.entries) {
      if (e.dump.empty()) continue;
      std::string path;
      const Status st = reports::find_dump(report_folder().string(), e.dump, &path);
      if (st.ok() && !path.empty() && !inside(report_folder(), path)) std::abort();
    }
  const reports::MergedReport m = reports::merge_reports(loaded, {"a", "b"});
  if (!m.status.ok()) return 0;
  // Every format of the cleaned report; report.json must read back to itself.
  const reports::Report r = reports::sanitized(m.report);
  const std::string json = reports::format_json(r);
  (void)reports::format_junit(r);
  (void)reports::format_markdown(r);
  (void)reports::format_html(r);
  const reports::LoadedReport back = reports::parse_json(json, "written");
  if (!back.status.ok() || reports::format_json(back.report) != json) std::abort();
  return 0;
}
