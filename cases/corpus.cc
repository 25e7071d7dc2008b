// Corpus directories of minimal failing ids (cases/corpus.h).
#include "cases/corpus.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cases/rng.h"
#include "cases/safe_text.h"

namespace deltacheck::cases {

namespace fs = std::filesystem;

std::string corpus_file_name(const std::string& id) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(stream_id(id)));
  return std::string(hex) + ".case";
}

Status write_corpus_case(const std::string& dir, const Case& c,
                         const std::vector<std::string>& notes, bool* added) {
  if (added) *added = false;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec))
    return Status::InvalidArgument("corpus '" + dir + "': cannot create the folder");
  const fs::path file = fs::path(dir) / corpus_file_name(c.id());
  if (fs::exists(file, ec)) return Status::Ok();
  const fs::path tmp = file.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << c.id() << "\n";
    for (const std::string& n : notes) f << "# " << printable_line(n) << "\n";
    f.close();
    if (!f) {
      fs::remove(tmp, ec);
      return Status::InvalidArgument("corpus '" + dir + "': cannot write " + file.string());
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return Status::InvalidArgument("corpus '" + dir + "': cannot write " + file.string());
  }
  if (added) *added = true;
  return Status::Ok();
}

StatusOr<std::vector<Case>> read_corpus(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Status::InvalidArgument("corpus '" + dir + "': not a folder");
  std::vector<fs::path> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".case" && it->is_regular_file(ec)) files.push_back(it->path());
  if (ec) return Status::InvalidArgument("corpus '" + dir + "': " + ec.message());
  std::sort(files.begin(), files.end());
  std::vector<Case> out;
  for (const fs::path& p : files) {
    std::ifstream f(p, std::ios::binary);
    std::string line;
    std::getline(f, line);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    StatusOr<Case> c = Case::from_id(line, true);
    if (!c.ok())
      return Status::InvalidArgument(printable_line(p.string() + ":1: " + c.status().message()));
    out.push_back(c.take());
  }
  if (out.empty()) return Status::InvalidArgument("corpus '" + dir + "' holds no .case file");
  return out;
}

}  // namespace deltacheck::cases
