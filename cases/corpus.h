// A corpus directory: the minimal failing ids a hunt found (`deltacheck hunt --corpus DIR`), one
// file each, that later runs replay as a suite (`--suite corpus:DIR`), so a found bug becomes a
// regression test. A file is named by a hash of its id (<16 hex digits>.case) and holds the id on
// its first line, then '#' comments (backend, failure class, the case it was shrunk from), so
// corpora of several shards merge by copying their files (the same id is the same file name).
#pragma once

#include <string>
#include <vector>

#include "cases/case.h"
#include "core/status.h"

namespace deltacheck::cases {

constexpr const char* kCorpusPrefix = "corpus:";

// The corpus file name of an id.
std::string corpus_file_name(const std::string& id);
// Adds `id` to the corpus in `dir` (created if needed), with `notes` as comment lines; `added`
// false when the id was there already (the file is left as it was).
Status write_corpus_case(const std::string& dir, const Case& c,
                         const std::vector<std::string>& notes, bool* added = nullptr);
// The cases of a corpus, ordered by file name; InvalidArgument naming an unreadable folder, a file
// whose first line is not a case id (file:1: why), or an empty corpus.
StatusOr<std::vector<Case>> read_corpus(const std::string& dir);

}  // namespace deltacheck::cases
