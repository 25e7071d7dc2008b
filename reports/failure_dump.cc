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
#include "golden/hdf5.h"
#include "harness/tolerance.h"
#include "reports/report.h"

namespace deltacheck::reports {
namespace {

std::mutex& hdf5_mutex() {
  static std::mutex mu;
  return mu;
}

using golden::Hid;

Status write_string_attr(hid_t obj, const char* name, const std::string& value) {
  if (!golden::write_string_attr(obj, name, value))
    return Status::Internal(std::string("cannot write attribute ") + name + golden::hdf5_detail());
  return Status::Ok();
}

// The variable-length string type the dump's attributes are read with.
Hid string_type() {
  Hid t = golden::type_h(H5Tcopy(H5T_C_S1));
  H5Tset_size(t.get(), H5T_VARIABLE);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  return t;
}

Status write_values(hid_t parent, const char* group, const ops::Values& values,
                    const std::vector<ops::OutputSpec>& specs) {
  Hid g = golden::group_h(H5Gcreate2(parent, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (g.get() < 0) return Status::Internal(std::string("cannot create group ") + group);
  for (const ops::OutputSpec& s : specs) {
    const auto it = values.find(s.name);
    if (it == values.end()) continue;
    std::vector<hsize_t> dims(s.shape.begin(), s.shape.end());
    hsize_t numel = 1;
    for (hsize_t d : dims) numel *= d;
    if (numel != it->second.size())
      return Status::Internal(fmt::format("{}/{}: {} values for shape {}", group, s.name,
                                          it->second.size(), cases::shape_string(s.shape)));
    Hid space =
        golden::space_h(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
    // float64 holding fp32 or 16-bit values has long runs of zero bits: shuffle + deflate
    // roughly halves the file.
    Hid dcpl = golden::plist_h(H5Pcreate(H5P_DATASET_CREATE));
    if (numel > 0 && H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
      std::vector<hsize_t> chunk(dims);
      hsize_t chunk_numel = numel;
      for (size_t d = 0; d < chunk.size() && chunk_numel > (1u << 16); ++d) {
        chunk_numel /= chunk[d];
        chunk[d] = std::max<hsize_t>(1, (1u << 16) / std::max<hsize_t>(1, chunk_numel));
        chunk_numel *= chunk[d];
      }
      H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
      H5Pset_shuffle(dcpl.get());
      H5Pset_deflate(dcpl.get(), 4);
    }
    Hid ds = golden::dataset_h(H5Dcreate2(g.get(), s.name.c_str(), H5T_IEEE_F64LE, space.get(),
                                          H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
    if (ds.get() < 0 ||
        H5Dwrite(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, it->second.data()) < 0)
      return Status::Internal(
          fmt::format("cannot write {}/{}{}", group, s.name, golden::hdf5_detail()));
    if (Status st = write_string_attr(ds.get(), "dtype", cases::dtype_name(s.dtype)); !st.ok())
      return st;
  }
  return Status::Ok();
}

Status add_failure(const std::string& file, const harness::PreparedCase& pc,
                   const cases::TensorMap& outputs, const harness::CaseResult& r,
                   const std::string& rerun) {
  Hid f = golden::file_h(H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
  if (f.get() < 0) return Status::Internal("cannot reopen " + file);
  Hid g =
      golden::group_h(H5Gopen2(f.get(), golden::escape_case_id(pc.c.id()).c_str(), H5P_DEFAULT));
  if (g.get() < 0) return Status::Internal("the case group is missing in " + file);
  ops::Values actual;
  for (const cases::Tensor& t : outputs.all()) actual[t.name()] = t.to_double();
  for (Status st : {write_values(g.get(), "actual", actual, pc.outputs),
                    write_values(g.get(), "baseline", harness::worst_baseline(pc), pc.outputs),
                    write_string_attr(g.get(), "backend", r.backend),
                    write_string_attr(g.get(), "verdict", harness::verdict_name(r.verdict)),
                    write_string_attr(g.get(), "message", r.message),
                    write_string_attr(g.get(), "rerun", rerun)})
    if (!st.ok()) return st;
  g.reset();
  if (!f.reset()) return Status::Internal("cannot finish writing " + file + golden::hdf5_detail());
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
  golden::quiet_hdf5();
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
  StatusOr<golden::FixtureCase> fc = reader.read(0);
  if (!fc.ok()) {
    d.status = fc.status();
    return d;
  }
  d.fixture.emplace(fc.take());
  golden::quiet_hdf5();
  Hid f = golden::file_h(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  Hid g = golden::group_h(H5Gopen2(f.get(), reader.case_groups()[0].c_str(), H5P_DEFAULT));
  if (g.get() < 0) {
    d.status = Status::InvalidArgument(path + ": cannot open the case group");
    return d;
  }
  for (const auto& [name, out] :
       {std::pair<const char*, ops::Values*>{"actual", &d.actual}, {"baseline", &d.baseline}})
    for (const ops::OutputSpec& s : d.fixture->outputs) {
      const std::string ds_path = std::string(name) + "/" + s.name;
      Hid ds = golden::dataset_h(H5Dopen2(g.get(), ds_path.c_str(), H5P_DEFAULT));
      Hid space = golden::space_h(ds.get() >= 0 ? H5Dget_space(ds.get()) : -1);
      const hssize_t n = space.get() >= 0 ? H5Sget_simple_extent_npoints(space.get()) : -1;
      std::vector<double>& v = (*out)[s.name];
      v.resize(static_cast<size_t>(std::max<hssize_t>(0, n)));
      if (n < 0 ||
          H5Dread(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) {
        d.status = Status::InvalidArgument(path + ": cannot read " + ds_path);
        return d;
      }
    }
  for (const auto& [name, out] : {std::pair<const char*, std::string*>{"backend", &d.backend},
                                  {"verdict", &d.verdict},
                                  {"message", &d.message},
                                  {"rerun", &d.rerun}}) {
    Hid attr = golden::attr_h(H5Aopen(g.get(), name, H5P_DEFAULT));
    Hid type = string_type();
    char* text = nullptr;
    if (attr.get() < 0 || H5Aread(attr.get(), type.get(), &text) < 0 || !text) {
      d.status = Status::InvalidArgument(path + ": attribute " + name + " missing or unreadable");
      return d;
    }
    *out = text;
    H5free_memory(text);
  }
  return d;
}

}  // namespace deltacheck::reports
