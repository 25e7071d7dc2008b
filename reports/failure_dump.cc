// Failure dumps (see failure_dump.h): the case is written with the golden fixture writer, then
// the backend's outputs, the baseline and the verdict are added to its group with the HDF5 C API
// before the file is renamed into place.
#include "reports/failure_dump.h"

#include <fmt/format.h>
#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <mutex>

#include "cases/fork_guard.h"
#include "cases/generator_version.h"
#include "cases/safe_text.h"
#include "golden/format.h"
#include "harness/tolerance.h"
#include "reports/report.h"

namespace deltacheck::reports {
namespace {

std::mutex& hdf5_mutex() {
  static std::mutex mu;
  return mu;
}

// Closes an HDF5 identifier on scope exit.
struct Closer {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Closer() {
    if (id >= 0) close(id);
  }
};

// Variable-length UTF-8 strings, as the fixture format writes them (h5py reads them as str).
hid_t string_type() {
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

Status write_string_attr(hid_t obj, const char* name, const std::string& value) {
  Closer type{string_type(), H5Tclose};
  Closer space{H5Screate(H5S_SCALAR), H5Sclose};
  Closer attr{H5Acreate2(obj, name, type.id, space.id, H5P_DEFAULT, H5P_DEFAULT), H5Aclose};
  const std::string utf8 = cases::valid_utf8(value);  // the type says UTF-8 (h5py decodes it)
  const char* p = utf8.c_str();
  if (attr.id < 0 || H5Awrite(attr.id, type.id, &p) < 0)
    return Status::Internal(std::string("cannot write attribute ") + name);
  return Status::Ok();
}

Status write_values(hid_t parent, const char* group, const harness::Values& values,
                    const std::vector<harness::OutputSpec>& specs) {
  Closer g{H5Gcreate2(parent, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose};
  if (g.id < 0) return Status::Internal(std::string("cannot create group ") + group);
  for (const harness::OutputSpec& s : specs) {
    const auto it = values.find(s.name);
    if (it == values.end()) continue;
    std::vector<hsize_t> dims(s.shape.begin(), s.shape.end());
    hsize_t numel = 1;
    for (hsize_t d : dims) numel *= d;
    if (numel != it->second.size())
      return Status::Internal(fmt::format("{}/{}: {} values for shape {}", group, s.name,
                                          it->second.size(), cases::shape_string(s.shape)));
    Closer space{H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose};
    // float64 holding fp32 or 16-bit values has long runs of zero bits: shuffle + deflate
    // roughly halves the file.
    Closer dcpl{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
    if (numel > 0 && H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
      std::vector<hsize_t> chunk(dims);
      hsize_t chunk_numel = numel;
      for (size_t d = 0; d < chunk.size() && chunk_numel > (1u << 16); ++d) {
        chunk_numel /= chunk[d];
        chunk[d] = std::max<hsize_t>(1, (1u << 16) / std::max<hsize_t>(1, chunk_numel));
        chunk_numel *= chunk[d];
      }
      H5Pset_chunk(dcpl.id, static_cast<int>(chunk.size()), chunk.data());
      H5Pset_shuffle(dcpl.id);
      H5Pset_deflate(dcpl.id, 4);
    }
    Closer ds{H5Dcreate2(g.id, s.name.c_str(), H5T_IEEE_F64LE, space.id, H5P_DEFAULT, dcpl.id,
                         H5P_DEFAULT),
              H5Dclose};
    if (ds.id < 0 ||
        H5Dwrite(ds.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, it->second.data()) < 0)
      return Status::Internal(fmt::format("cannot write {}/{}", group, s.name));
    if (Status st = write_string_attr(ds.id, "dtype", cases::dtype_name(s.dtype)); !st.ok())
      return st;
  }
  return Status::Ok();
}

Status add_failure(const std::string& file, const harness::PreparedCase& pc,
                   const cases::TensorMap& outputs, const harness::CaseResult& r,
                   const std::string& rerun) {
  Closer f{H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose};
  if (f.id < 0) return Status::Internal("cannot reopen " + file);
  Closer g{H5Gopen2(f.id, golden::escape_case_id(pc.c.id()).c_str(), H5P_DEFAULT), H5Gclose};
  if (g.id < 0) return Status::Internal("the case group is missing in " + file);
  harness::Values actual;
  for (const cases::Tensor& t : outputs.all()) actual[t.name()] = t.to_double();
  for (Status st :
       {write_values(g.id, "actual", actual, pc.outputs),
        write_values(g.id, "baseline", pc.baseline, pc.outputs),
        write_string_attr(g.id, "backend", r.backend),
        write_string_attr(g.id, "verdict", harness::verdict_name(r.verdict)),
        write_string_attr(g.id, "message", r.message), write_string_attr(g.id, "rerun", rerun)})
    if (!st.ok()) return st;
  if (H5Fclose(f.id) < 0) {
    f.id = -1;
    return Status::Internal("cannot finish writing " + file);
  }
  f.id = -1;
  return Status::Ok();
}

}  // namespace

std::string dump_file_name(const std::string& case_id, const std::string& backend) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across builds and machines
  for (char ch : case_id + '\n' + backend) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ull;
  }
  std::string readable = case_id.substr(0, case_id.find('(')) + "-" + backend;
  for (char& ch : readable)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-') ch = '_';
  return fmt::format("{}-{:016x}.h5", readable.substr(0, 60), h);
}

Status write_failure_dump(const std::string& path, const harness::PreparedCase& pc,
                          const cases::TensorMap& outputs, const harness::CaseResult& r,
                          const std::string& rerun) {
  const cases::NoForkSection no_fork;  // HDF5 holds a library-wide lock
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  const size_t slash = path.rfind('/');
  const std::string partial = (slash == std::string::npos ? "" : path.substr(0, slash + 1)) + "." +
                              path.substr(slash == std::string::npos ? 0 : slash + 1) + ".partial";
  golden::FixtureWriter writer;
  golden::FileInfo info;
  info.generator_version = cases::kGeneratorVersion;
  info.tolerance_policy = harness::TolerancePolicy::kId;
  info.producer = "deltacheck " + tool_version() + " (" + git_revision() + ") failure dump";
  golden::FixtureCase fc{pc.c,
                         pc.inputs,
                         pc.expected,
                         pc.outputs,
                         cases::kGeneratorVersion,
                         harness::TolerancePolicy::kId,
                         {}};
  Status st = writer.open(partial, info);
  if (st.ok()) st = writer.add(fc);
  if (st.ok()) st = writer.commit();
  if (st.ok()) st = add_failure(partial, pc, outputs, r, rerun);
  // The fixture writer's temporary file is private (0600); a dump is an artifact others read.
  if (st.ok()) ::chmod(partial.c_str(), 0644);
  if (st.ok() && std::rename(partial.c_str(), path.c_str()) != 0)
    st = Status::Internal("cannot rename " + partial + " to " + path);
  if (!st.ok()) {
    std::remove(partial.c_str());
    return Status::Internal(path + ": " + st.message());
  }
  return Status::Ok();
}

FailureDump read_failure_dump(const std::string& path) {
  const cases::NoForkSection no_fork;  // HDF5 holds a library-wide lock
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  FailureDump d;
  golden::FixtureReader reader;
  d.status = reader.open(path);
  if (!d.status.ok()) return d;
  if (reader.case_groups().size() != 1) {
    d.status = Status::InvalidArgument(path + ": a failure dump holds exactly one case");
    return d;
  }
  golden::StatusOr<golden::FixtureCase> fc = reader.read(0);
  if (!fc.ok()) {
    d.status = fc.status();
    return d;
  }
  d.fixture.emplace(fc.take());
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  Closer f{H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose};
  Closer g{H5Gopen2(f.id, reader.case_groups()[0].c_str(), H5P_DEFAULT), H5Gclose};
  if (g.id < 0) {
    d.status = Status::InvalidArgument(path + ": cannot open the case group");
    return d;
  }
  for (const auto& [name, out] :
       {std::pair<const char*, harness::Values*>{"actual", &d.actual}, {"baseline", &d.baseline}})
    for (const harness::OutputSpec& s : d.fixture->outputs) {
      const std::string ds_path = std::string(name) + "/" + s.name;
      Closer ds{H5Dopen2(g.id, ds_path.c_str(), H5P_DEFAULT), H5Dclose};
      Closer space{ds.id >= 0 ? H5Dget_space(ds.id) : -1, H5Sclose};
      const hssize_t n = space.id >= 0 ? H5Sget_simple_extent_npoints(space.id) : -1;
      std::vector<double>& v = (*out)[s.name];
      v.resize(static_cast<size_t>(std::max<hssize_t>(0, n)));
      if (n < 0 || H5Dread(ds.id, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) {
        d.status = Status::InvalidArgument(path + ": cannot read " + ds_path);
        return d;
      }
    }
  for (const auto& [name, out] : {std::pair<const char*, std::string*>{"backend", &d.backend},
                                  {"verdict", &d.verdict},
                                  {"message", &d.message},
                                  {"rerun", &d.rerun}}) {
    Closer attr{H5Aopen(g.id, name, H5P_DEFAULT), H5Aclose};
    Closer type{string_type(), H5Tclose};
    char* text = nullptr;
    if (attr.id < 0 || H5Aread(attr.id, type.id, &text) < 0 || !text) {
      d.status = Status::InvalidArgument(path + ": attribute " + name + " missing or unreadable");
      return d;
    }
    *out = text;
    H5free_memory(text);
  }
  return d;
}

}  // namespace deltacheck::reports
