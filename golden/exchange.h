// The external-candidate protocol's files (golden/README.md, "External programs"): {in} is a
// fixture file (format.h) holding the one case, its inputs and output specs, without expected
// values; {out}, written by the program, holds one dataset per output at the root. Errors are
// values, one line each, as in format.h.
#pragma once

#include <string>
#include <vector>

#include "cases/case.h"
#include "cases/tensor.h"
#include "core/status.h"
#include "ops/operation.h"

namespace deltacheck::cases {
class SafeDir;  // cases/safe_file.h
}  // namespace deltacheck::cases

namespace deltacheck::golden {

// {in}: a fixture file with the one case, its inputs and output specs, no expected values, as
// file `name` of the case folder `dir` (which the candidate can write: made and written relative
// to the folder's descriptor, FixtureWriter::open(SafeDir, ...)).
Status write_input_file(const cases::SafeDir& dir, const std::string& name, const cases::Case& c,
                        const cases::TensorMap& inputs,
                        const std::vector<ops::OutputSpec>& outputs);
// {out}: fills every tensor of `outputs` (names, shapes and dtypes fixed by the caller) from the
// file's root datasets. A root attribute "unsupported" is the program declining the case
// (Status Unsupported with its text); anything missing or malformed is InvalidArgument.
Status read_output_file(const std::string& path, cases::TensorMap& outputs);
// The same, and the program's precision-profile declaration (a root attribute `profile`, e.g.
// "chunk=128,cumsum=independent"; docs/external.md): its text, NUL-terminated, in `profile`, a
// kU8 tensor of `outputs` that is not read as an output (left zero without the attribute; a
// text that does not fit is an error).
Status read_output_file(const std::string& path, cases::TensorMap& outputs, cases::Tensor* profile);
// Writes `outputs` in the {out} format (tests, and C++ programs that answer the protocol).
Status write_output_file(const std::string& path, const cases::TensorMap& outputs);

}  // namespace deltacheck::golden
