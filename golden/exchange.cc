// The external program's {in} and {out} files (exchange.h) with the fixture writer and the
// typed HDF5 datasets of hdf5.h.
#include "golden/exchange.h"

#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include "cases/fork_guard.h"
#include "cases/safe_file.h"
#include "cases/safe_text.h"
#include "golden/format.h"
#include "golden/hdf5.h"

namespace deltacheck::golden {
namespace {

using cases::DType;
using cases::Tensor;

Status invalid(const std::string& m) { return Status::InvalidArgument(m); }

}  // namespace

Status write_input_file(const cases::SafeDir& dir, const std::string& name, const cases::Case& c,
                        const cases::TensorMap& inputs,
                        const std::vector<ops::OutputSpec>& outputs) {
  const cases::NoForkSection no_fork;  // HDF5 holds a library-wide lock
  FixtureWriter w;
  FileInfo info;
  info.producer = "deltacheck external backend";
  if (Status st = w.open(dir, name, info); !st.ok()) return st;
  FixtureCase fc{c, {}, {}, outputs, 0, "", {}};
  // Copies without guard bands: the program sees exactly the tensors.
  for (const Tensor& t : inputs.all()) {
    Tensor& copy = fc.inputs.add(Tensor(t.name(), t.dtype(), t.shape()));
    if (t.nbytes() > 0) std::memcpy(copy.data(), t.data(), t.nbytes());
  }
  if (Status st = w.add(fc); !st.ok()) return st;
  return w.commit(/*durable=*/false);  // removed after the call
}

Status read_output_file(const std::string& path, cases::TensorMap& outputs) {
  return read_output_file(path, outputs, nullptr);
}

Status read_output_file(const std::string& path, cases::TensorMap& outputs,
                        cases::Tensor* profile) {
  const cases::NoForkSection no_fork;  // HDF5 holds a library-wide lock
  quiet_hdf5();
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return invalid("the program wrote no output file {out}");
  Hid fapl = plist_h(H5Pcreate(H5P_FILE_ACCESS));
  Hid file = file_h(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
  if (!file.ok()) return invalid("{out} is not a readable HDF5 file" + hdf5_detail());
  const hid_t f = file.get();
  if (H5Aexists(f, "unsupported") > 0) {
    StatusOr<std::string> why = read_attr_string(f, "{out}", "unsupported");
    // The program's own words, bound for reports and the console.
    return Status::Unsupported(why.ok() ? cases::printable_line(why.value(), 1000)
                                        : "declined by the program");
  }
  if (profile && H5Aexists(f, "profile") > 0) {
    StatusOr<std::string> p = read_attr_string(f, "{out}", "profile");
    if (!p.ok()) return p.status();
    if (p.value().size() >= static_cast<size_t>(profile->numel()))
      return invalid("{out} attribute profile is longer than " +
                     std::to_string(profile->numel() - 1) + " characters");
    std::memcpy(profile->data(), p.value().data(), p.value().size());
  }
  for (Tensor& t : outputs.all()) {
    if (&t == profile) continue;
    const std::string where = "output '" + t.name() + "'";
    if (H5Lexists(f, t.name().c_str(), H5P_DEFAULT) <= 0) {
      std::string found;
      if (StatusOr<std::vector<std::string>> names = list_links(f, "{out}"); names.ok())
        for (const std::string& n : names.value())
          found += (found.empty() ? "" : ", ") + cases::printable_line(n, 200);
      return invalid(where + " missing from {out} (found: " + (found.empty() ? "nothing" : found) +
                     ")");
    }
    if (Status st = require_hard_link(f, t.name(), where + " in {out}"); !st.ok()) return st;
    Hid d = dataset_h(H5Dopen2(f, t.name().c_str(), H5P_DEFAULT));
    if (!d.ok()) return invalid(where + " in {out} is not a readable dataset" + hdf5_detail());
    Hid type = type_h(H5Dget_type(d.get()));
    const bool half_bits = t.dtype() == DType::kBF16 || t.dtype() == DType::kF16;
    const bool native_half = t.dtype() == DType::kF16 && is_ieee_half(type.get());
    if (!native_half && !matches_storage(type.get(), t.dtype()))
      return invalid(where + ": dtype " + describe_type(type.get()) + ", expected " +
                     cases::dtype_name(t.dtype()) +
                     (half_bits ? " (16-bit unsigned integers holding the bits, with attribute "
                                  "dtype='" +
                                      std::string(cases::dtype_name(t.dtype())) + "')"
                                : ""));
    if (half_bits && !native_half) {
      // uint16 alone could hold either 16-bit format: the attribute says which one was meant.
      StatusOr<std::string> dt = read_attr_string(d.get(), where, "dtype");
      if (!dt.ok() || dt.value() != cases::dtype_name(t.dtype()))
        return invalid(where + ": uint16 data needs attribute dtype='" +
                       cases::dtype_name(t.dtype()) + "'" +
                       (dt.ok() ? " (found '" + dt.value() + "')" : ""));
    }
    StatusOr<std::vector<int64_t>> shape =
        dataset_shape(d.get(), where, storage_of(t.dtype()).size);
    if (!shape.ok()) return shape.status();
    if (shape.value() != t.shape())
      return invalid(where + ": shape " + cases::shape_string(shape.value()) + ", expected " +
                     cases::shape_string(t.shape()));
    // The program's file is as untrusted as the program: only data stored in it, in chunks no
    // larger than the output needs (and 64 MiB).
    uint64_t chunk = 0;
    if (Status st = check_storage(d.get(), where, storage_of(t.dtype()).size,
                                  std::max<uint64_t>(t.nbytes(), uint64_t{64} << 20), &chunk);
        !st.ok())
      return st;
    if (t.nbytes() > 0) {
      const hid_t mem = native_half ? type.get() : storage_of(t.dtype()).mem_type;
      if (H5Dread(d.get(), mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data()) < 0)
        return invalid(where + ": " + read_failure(d.get()));
    }
  }
  return Status::Ok();
}

Status write_output_file(const std::string& path, const cases::TensorMap& outputs) {
  const cases::NoForkSection no_fork;  // HDF5 holds a library-wide lock
  quiet_hdf5();
  Hid fcpl = plist_h(H5Pcreate(H5P_FILE_CREATE));
  H5Pset_obj_track_times(fcpl.get(), false);
  Hid file = file_h(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT));
  if (!file.ok()) return invalid("cannot create an HDF5 file" + hdf5_detail());
  for (const Tensor& t : outputs.all()) {
    const bool half = t.dtype() == DType::kBF16 || t.dtype() == DType::kF16;
    if (Status st = write_dataset(file.get(), t.name(), t.dtype(), t.shape(), t.data(), t.nbytes(),
                                  false, half);
        !st.ok())
      return st;
  }
  if (!file.reset()) return invalid("cannot finish writing" + hdf5_detail());
  return Status::Ok();
}

}  // namespace deltacheck::golden
