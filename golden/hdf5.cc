// The HDF5 plumbing shared by the fixture format, the external protocol's files and the failure
// dumps (hdf5.h).
#include "golden/hdf5.h"

#include <cstdio>
#include <cstring>

#include "cases/safe_text.h"
#include "golden/sha256.h"

namespace deltacheck::golden {
namespace {

using cases::DType;

Status invalid(const std::string& m) { return Status::InvalidArgument(m); }

// Before any other HDF5 call of the process (a static initializer of this library): the exit
// handler that would crash on a file a full disk left half-open is never installed.
const bool kNoExitHandler = [] {
  H5dont_atexit();
  return true;
}();

herr_t innermost_error(unsigned, const H5E_error2_t* e, void* out) {
  if (e->desc && *e->desc) *static_cast<std::string*>(out) = e->desc;
  return 0;
}

// An attribute with its stored type and number of elements.
struct Attr {
  Hid attr, type;
  hssize_t n = 0;
};

StatusOr<Attr> open_attr(hid_t obj, const std::string& where, const char* name) {
  const htri_t exists = H5Aexists(obj, name);
  if (exists <= 0)
    return invalid(where + ": attribute '" + name + "' missing" +
                   (exists < 0 ? hdf5_detail() : ""));
  Attr a;
  a.attr = attr_h(H5Aopen(obj, name, H5P_DEFAULT));
  if (!a.attr.ok()) return invalid(where + ": attribute '" + name + "' unreadable" + hdf5_detail());
  a.type = type_h(H5Aget_type(a.attr.get()));
  Hid space = space_h(H5Aget_space(a.attr.get()));
  a.n = H5Sget_simple_extent_npoints(space.get());
  return a;
}

// Object creation without timestamps (reproducible bytes), children indexed by creation order.
Hid group_plist() {
  Hid p = plist_h(H5Pcreate(H5P_GROUP_CREATE));
  H5Pset_obj_track_times(p.get(), false);
  H5Pset_link_creation_order(p.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  H5Pset_attr_creation_order(p.get(), H5P_CRT_ORDER_TRACKED);
  return p;
}

// The name and id of an HDF5 filter in a dataset's pipeline, e.g. "'lzf' (filter 32000)".
std::string filter_text(H5Z_filter_t id, const char* name) {
  std::string n = cases::printable_line(name, 60);
  return (n.empty() ? std::string() : "'" + n + "' ") + "(filter " + std::to_string(id) + ")";
}

// The first filter of the pipeline this library cannot decode ("" when none); `mandatory_only`
// skips optional ones (HDF5 skips those where the writer did).
std::string missing_filter(hid_t dcpl, bool mandatory_only) {
  const int n = H5Pget_nfilters(dcpl);
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, config = 0;
    size_t nvalues = 0;
    char name[64] = {};
    const H5Z_filter_t id = H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &nvalues,
                                           nullptr, sizeof name, name, &config);
    if (id < 0) return "an unreadable filter";
    if (mandatory_only && (flags & H5Z_FLAG_OPTIONAL)) continue;
    if (H5Zfilter_avail(id) <= 0) return filter_text(id, name);
  }
  return "";
}

}  // namespace

void quiet_hdf5() {
  (void)kNoExitHandler;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

std::string hdf5_detail() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, innermost_error, &msg);
  H5Eclear2(H5E_DEFAULT);
  // A failed read or write describes itself with a timestamp, the buffer's address and the
  // system's message ("..., error message = 'File too large', buf = 0x7f..."): the message is
  // what a user needs.
  const std::string key = "error message = '";
  if (const size_t at = msg.find(key); at != std::string::npos) {
    const size_t end = msg.find('\'', at + key.size());
    msg = msg.substr(0, msg.find(':')) + ": " + msg.substr(at + key.size(), end - at - key.size());
  }
  msg = msg.substr(0, msg.find('\n'));
  return msg.empty() ? "" : " (" + cases::printable_line(msg, 200) + ")";
}

bool write_string_attr(hid_t obj, const char* name, const std::string& value) {
  Hid type = type_h(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Hid space = space_h(H5Screate(H5S_SCALAR));
  Hid a = attr_h(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  const std::string utf8 = cases::valid_utf8(value);
  const char* p = utf8.c_str();
  return a.ok() && H5Awrite(a.get(), type.get(), &p) >= 0;
}

// --- typed datasets ---------------------------------------------------------------------------

Storage storage_of(DType t) {
  switch (t) {
    case DType::kF32:
      return {H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, H5T_FLOAT, 4, H5T_SGN_ERROR};
    case DType::kF64:
      return {H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, H5T_FLOAT, 8, H5T_SGN_ERROR};
    case DType::kBF16:
    case DType::kF16:
      return {H5T_STD_U16LE, H5T_NATIVE_UINT16, H5T_INTEGER, 2, H5T_SGN_NONE};
    case DType::kI32:
      return {H5T_STD_I32LE, H5T_NATIVE_INT32, H5T_INTEGER, 4, H5T_SGN_2};
    case DType::kI64:
      return {H5T_STD_I64LE, H5T_NATIVE_INT64, H5T_INTEGER, 8, H5T_SGN_2};
    case DType::kU8:
      return {H5T_STD_U8LE, H5T_NATIVE_UINT8, H5T_INTEGER, 1, H5T_SGN_NONE};
  }
  return {H5T_STD_U8LE, H5T_NATIVE_UINT8, H5T_INTEGER, 1, H5T_SGN_NONE};
}

std::string describe_type(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const size_t size = H5Tget_size(type);
  if (cls == H5T_FLOAT) return std::to_string(8 * size) + "-bit float";
  if (cls == H5T_INTEGER)
    return std::to_string(8 * size) + "-bit " +
           (H5Tget_sign(type) == H5T_SGN_NONE ? "unsigned " : "signed ") + "integer";
  if (cls == H5T_STRING) return "string";
  if (cls == H5T_ENUM) return "enum (e.g. numpy bool)";
  if (cls == H5T_COMPOUND) return "compound";
  return "HDF5 type class " + std::to_string(static_cast<int>(cls));
}

bool matches_storage(hid_t type, DType t) {
  const Storage s = storage_of(t);
  if (H5Tget_class(type) != s.cls || H5Tget_size(type) != s.size) return false;
  return s.cls != H5T_INTEGER || H5Tget_sign(type) == s.sign;
}

// An IEEE binary16 float type (how numpy's float16 arrives through h5py).
bool is_ieee_half(hid_t type) {
  if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 2) return false;
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return false;
  return spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 &&
         H5Tget_ebias(type) == 15 && H5Tget_order(type) == H5T_ORDER_LE;
}

// --- attributes ---------------------------------------------------------------------------

Status write_attr_string(hid_t obj, const char* name, const std::string& value) {
  if (!write_string_attr(obj, name, value))
    return Status::Internal(std::string("cannot write attribute '") + name + "'" + hdf5_detail());
  return Status::Ok();
}

Status write_attr_strings(hid_t obj, const char* name, const std::vector<std::string>& values) {
  Hid type = type_h(H5Tcopy(H5T_C_S1));
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  const hsize_t n = values.size();
  Hid space = space_h(H5Screate_simple(1, &n, nullptr));
  Hid a = attr_h(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT));
  std::vector<const char*> p;
  for (const std::string& v : values) p.push_back(v.c_str());
  p.push_back(nullptr);
  if (!a.ok() || H5Awrite(a.get(), type.get(), p.data()) < 0)
    return Status::Internal(std::string("cannot write attribute '") + name + "'" + hdf5_detail());
  return Status::Ok();
}

Status write_attr_ints(hid_t obj, const char* name, const std::vector<int64_t>& values,
                       bool scalar) {
  const hsize_t n = values.size();
  Hid space = space_h(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr));
  Hid a = attr_h(H5Acreate2(obj, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT));
  const int64_t dummy = 0;
  if (!a.ok() || H5Awrite(a.get(), H5T_NATIVE_INT64, values.empty() ? &dummy : values.data()) < 0)
    return Status::Internal(std::string("cannot write attribute '") + name + "'" + hdf5_detail());
  return Status::Ok();
}

Status write_attr_int(hid_t obj, const char* name, int64_t value) {
  return write_attr_ints(obj, name, {value}, true);
}

StatusOr<std::string> read_attr_string(hid_t obj, const std::string& where, const char* name) {
  StatusOr<Attr> opened = open_attr(obj, where, name);
  if (!opened.ok()) return opened.status();
  const Attr& a = opened.value();
  if (H5Tget_class(a.type.get()) != H5T_STRING || a.n != 1)
    return invalid(where + ": attribute '" + name + "' is not a string");
  if (H5Tis_variable_str(a.type.get()) > 0) {
    Hid mem = type_h(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(a.type.get()));
    char* p = nullptr;
    if (H5Aread(a.attr.get(), mem.get(), &p) < 0 || !p)
      return invalid(where + ": attribute '" + name + "' unreadable" + hdf5_detail());
    std::string s(p);
    H5free_memory(p);
    return s;
  }
  const size_t size = H5Tget_size(a.type.get());
  if (size == 0 || size > (1u << 20))
    return invalid(where + ": attribute '" + name + "' has an implausible size");
  std::string s(size, '\0');
  if (H5Aread(a.attr.get(), a.type.get(), s.data()) < 0)
    return invalid(where + ": attribute '" + name + "' unreadable" + hdf5_detail());
  s.resize(std::strlen(s.c_str()));
  return s;
}

StatusOr<std::vector<std::string>> read_attr_strings(hid_t obj, const std::string& where,
                                                     const char* name) {
  StatusOr<Attr> opened = open_attr(obj, where, name);
  if (!opened.ok()) return opened.status();
  const Attr& a = opened.value();
  if (H5Tget_class(a.type.get()) != H5T_STRING || H5Tis_variable_str(a.type.get()) <= 0 ||
      a.n < 0 || a.n > 100000)
    return invalid(where + ": attribute '" + name + "' is not a list of strings");
  Hid mem = type_h(H5Tcopy(H5T_C_S1));
  H5Tset_size(mem.get(), H5T_VARIABLE);
  H5Tset_cset(mem.get(), H5Tget_cset(a.type.get()));
  std::vector<char*> p(static_cast<size_t>(a.n) + 1, nullptr);
  if (a.n > 0 && H5Aread(a.attr.get(), mem.get(), p.data()) < 0)
    return invalid(where + ": attribute '" + name + "' unreadable" + hdf5_detail());
  std::vector<std::string> out;
  for (hssize_t i = 0; i < a.n; ++i) {
    out.push_back(p[i] ? p[i] : "");
    if (p[i]) H5free_memory(p[i]);
  }
  return out;
}

StatusOr<std::vector<int64_t>> read_attr_ints(hid_t obj, const std::string& where,
                                              const char* name) {
  StatusOr<Attr> opened = open_attr(obj, where, name);
  if (!opened.ok()) return opened.status();
  const Attr& a = opened.value();
  if (H5Tget_class(a.type.get()) != H5T_INTEGER || a.n < 0 || a.n > 64)
    return invalid(where + ": attribute '" + name + "' is not a short list of integers");
  std::vector<int64_t> v(static_cast<size_t>(a.n) + 1);
  if (a.n > 0 && H5Aread(a.attr.get(), H5T_NATIVE_INT64, v.data()) < 0)
    return invalid(where + ": attribute '" + name + "' unreadable" + hdf5_detail());
  v.resize(static_cast<size_t>(a.n));
  return v;
}

StatusOr<int64_t> read_attr_int(hid_t obj, const std::string& where, const char* name) {
  StatusOr<std::vector<int64_t>> v = read_attr_ints(obj, where, name);
  if (!v.ok()) return v.status();
  if (v.value().size() != 1) return invalid(where + ": attribute '" + name + "' is not a number");
  return v.value()[0];
}

// --- groups and datasets ------------------------------------------------------------------

StatusOr<Hid> create_group(hid_t parent, const std::string& name) {
  Hid gcpl = group_plist();
  Hid g = group_h(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT));
  if (!g.ok()) return Status::Internal("cannot create group '" + name + "'" + hdf5_detail());
  return g;
}

// Writes one dataset; with `checksum`, also its dtype and SHA-256 attributes.
Status write_dataset(hid_t group, const std::string& name, DType dtype,
                     const std::vector<int64_t>& shape, const void* data, size_t nbytes,
                     bool checksum, bool dtype_attr) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Hid space =
      space_h(dims.empty() ? H5Screate(H5S_SCALAR)
                           : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  Hid dcpl = plist_h(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_obj_track_times(dcpl.get(), false);
  H5Pset_attr_creation_order(dcpl.get(), H5P_CRT_ORDER_TRACKED);
  const Storage s = storage_of(dtype);
  Hid d = dataset_h(H5Dcreate2(group, name.c_str(), s.file_type, space.get(), H5P_DEFAULT,
                               dcpl.get(), H5P_DEFAULT));
  if (!d.ok()) return Status::Internal("cannot create dataset '" + name + "'" + hdf5_detail());
  if (nbytes > 0 && H5Dwrite(d.get(), s.mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    return Status::Internal("cannot write dataset '" + name + "'" + hdf5_detail());
  if (dtype_attr) {
    if (Status st = write_attr_string(d.get(), "dtype", cases::dtype_name(dtype)); !st.ok())
      return st;
  }
  if (checksum) {
    if (Status st = write_attr_string(d.get(), "sha256", sha256_hex(data, nbytes)); !st.ok())
      return st;
  }
  return Status::Ok();
}

// Shape of a dataset, refusing implausible extents (a corrupted header) before any allocation.
StatusOr<std::vector<int64_t>> dataset_shape(hid_t d, const std::string& where, size_t elem) {
  Hid space = space_h(H5Dget_space(d));
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0 || rank > 16) return invalid(where + ": unreadable or implausible dataspace");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
    return invalid(where + ": unreadable dataspace" + hdf5_detail());
  std::vector<int64_t> shape;
  uint64_t bytes = elem;
  for (hsize_t x : dims) {
    if (x > (uint64_t{1} << 40) || (x > 0 && bytes > (uint64_t{1} << 40) / x))
      return invalid(where + ": implausible shape");
    bytes *= x;
    shape.push_back(static_cast<int64_t>(x));
  }
  return shape;
}

// Groups and datasets under `g`, in creation order when the file tracks it, else by name.
StatusOr<std::vector<std::string>> list_links(hid_t g, const std::string& where) {
  H5G_info_t info;
  if (H5Gget_info(g, &info) < 0) return invalid(where + ": unreadable group" + hdf5_detail());
  if (info.nlinks > 1000000) return invalid(where + ": implausible number of entries");
  // Creation order where the file has the index (ours do), else by name (e.g. h5py's files).
  H5_index_t index = H5_INDEX_CRT_ORDER;
  if (info.nlinks > 0 &&
      H5Lget_name_by_idx(g, ".", index, H5_ITER_INC, 0, nullptr, 0, H5P_DEFAULT) < 0) {
    H5Eclear2(H5E_DEFAULT);
    index = H5_INDEX_NAME;
  }
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n = H5Lget_name_by_idx(g, ".", index, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) return invalid(where + ": unreadable entry" + hdf5_detail());
    std::string name(static_cast<size_t>(n) + 1, '\0');
    H5Lget_name_by_idx(g, ".", index, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(static_cast<size_t>(n));
    names.push_back(std::move(name));
  }
  return names;
}

// The link `name` in `parent` must be a hard link: a soft or external link could lead outside
// the file (another file, /proc), and only what the file itself holds is read.
Status require_hard_link(hid_t parent, const std::string& name, const std::string& where) {
  H5L_info_t info;
  if (H5Lget_info(parent, name.c_str(), &info, H5P_DEFAULT) < 0)
    return invalid(where + ": unreadable link" + hdf5_detail());
  if (info.type == H5L_TYPE_HARD) return Status::Ok();
  return invalid(
      where +
      (info.type == H5L_TYPE_EXTERNAL ? ": an external link (to another file)" : ": a soft link") +
      ": only datasets and groups stored in the file itself are read");
}

StatusOr<Hid> open_group(hid_t parent, const std::string& name, const std::string& where) {
  if (H5Lexists(parent, name.c_str(), H5P_DEFAULT) <= 0)
    return invalid(where + ": group '" + name + "' missing");
  if (Status st = require_hard_link(parent, name, where + ": group '" + name + "'"); !st.ok())
    return st;
  Hid g = group_h(H5Gopen2(parent, name.c_str(), H5P_DEFAULT));
  if (!g.ok()) return invalid(where + ": '" + name + "' is not a readable group" + hdf5_detail());
  return g;
}

std::string size_text(double bytes) {
  char buf[32];
  if (bytes >= 1e9)
    std::snprintf(buf, sizeof buf, "%.3g GB", bytes / 1e9);
  else if (bytes >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3g MB", bytes / 1e6);
  else
    std::snprintf(buf, sizeof buf, "%.3g kB", bytes / 1e3);
  return buf;
}

// How a dataset is stored, checked before a byte of it is read: contiguous or chunked in the file
// itself (not virtual, not in external raw files, which could be anything: /proc/self/environ),
// with filters this library can decode, and chunks that fit: a chunk is decompressed whole, so its
// size (and the chunk cache) is memory too. `max_chunk` bounds one chunk's bytes.
Status check_storage(hid_t d, const std::string& where, size_t elem, uint64_t max_chunk,
                     uint64_t* chunk_bytes) {
  Hid dcpl = plist_h(H5Dget_create_plist(d));
  if (!dcpl.ok()) return invalid(where + ": unreadable storage properties" + hdf5_detail());
  const H5D_layout_t layout = H5Pget_layout(dcpl.get());
  if (layout == H5D_VIRTUAL)
    return invalid(where +
                   ": a virtual dataset (its data lives in other files): only data "
                   "stored in the file itself is read");
  if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED)
    return invalid(where + ": stored " +
                   (layout == H5D_COMPACT ? "compact" : "in an unknown layout") +
                   ": only contiguous or chunked datasets are read");
  if (H5Pget_external_count(dcpl.get()) != 0)
    return invalid(where +
                   ": its data is in external files: only data stored in the file itself "
                   "is read");
  *chunk_bytes = 0;
  if (layout == H5D_CHUNKED) {
    hsize_t dims[32] = {};
    const int rank = H5Pget_chunk(dcpl.get(), 32, dims);
    if (rank < 0) return invalid(where + ": unreadable chunk shape" + hdf5_detail());
    uint64_t bytes = elem;
    for (int i = 0; i < rank; ++i) {
      if (dims[i] > 0 && bytes > (uint64_t{1} << 40) / dims[i])
        return invalid(where + ": implausible chunk shape");
      bytes *= dims[i];
    }
    if (bytes > max_chunk)
      return invalid(where + ": chunks of " + size_text(static_cast<double>(bytes)) +
                     " each, more than the " + size_text(static_cast<double>(max_chunk)) +
                     " it may take (a chunk is read whole)");
    *chunk_bytes = bytes;
    if (const std::string f = missing_filter(dcpl.get(), true); !f.empty())
      return invalid(
          where + ": compressed with " + f +
          ", which this HDF5 library cannot decode (write it with gzip or uncompressed)");
  }
  return Status::Ok();
}

// The reason a read failed: an unavailable (optional) filter, or what HDF5 says.
std::string read_failure(hid_t d) {
  const std::string detail = hdf5_detail();
  Hid dcpl = plist_h(H5Dget_create_plist(d));
  if (dcpl.ok())
    if (const std::string f = missing_filter(dcpl.get(), false); !f.empty())
      return "compressed with " + f +
             ", which this HDF5 library cannot decode (write it with gzip or uncompressed)";
  return "data unreadable (truncated or corrupted file)" + detail;
}

}  // namespace deltacheck::golden
