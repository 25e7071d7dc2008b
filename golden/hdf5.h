// The HDF5 C API as deltacheck uses it everywhere (fixtures, {in}/{out}, failure dumps): one
// RAII handle type that closes every identifier on every path, the library kept quiet (errors are
// deltacheck's one-line messages), a short readable reason from HDF5's error stack, and the typed
// attributes and datasets that the fixture format (format.h) and the external protocol's files
// (exchange.h) are made of. Readers take untrusted files: every function that reads refuses
// implausible sizes, links and storage before allocating, and names `where` in its errors.
//
// A file whose close fails (a full disk: HDF5 cannot flush it) stays half-open inside the library,
// and the library's own exit handler then crashes closing it again (SIGSEGV in H5F__close_cb).
// So the exit handler is never installed: every file deltacheck opens is closed by its Hid, and a
// file that cannot be closed is a temporary one that is removed anyway.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cases/tensor.h"
#include "core/status.h"

namespace deltacheck::golden {

// An HDF5 identifier closed on scope exit.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  Hid(Hid&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = -1;
    }
    return *this;
  }
  ~Hid() { reset(); }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  // Closes now; false when closing failed (for a file: data may not have reached the disk).
  bool reset() {
    bool fine = true;
    if (id_ >= 0 && close_) fine = close_(id_) >= 0;
    id_ = -1;
    return fine;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

inline Hid file_h(hid_t id) { return Hid(id, H5Fclose); }
inline Hid group_h(hid_t id) { return Hid(id, H5Gclose); }
inline Hid dataset_h(hid_t id) { return Hid(id, H5Dclose); }
inline Hid space_h(hid_t id) { return Hid(id, H5Sclose); }
inline Hid type_h(hid_t id) { return Hid(id, H5Tclose); }
inline Hid attr_h(hid_t id) { return Hid(id, H5Aclose); }
inline Hid plist_h(hid_t id) { return Hid(id, H5Pclose); }

// HDF5 prints its error stack to stderr by default; deltacheck reports its own one-line errors.
// The setting is per thread in a thread-safe build, so every entry point calls this.
void quiet_hdf5();

// The most specific message on the current HDF5 error stack as " (reason)", one short line
// without addresses ("" when the stack is empty; a failed write says the system's reason, e.g.
// " (File too large)"); clears the stack.
std::string hdf5_detail();

// A variable-length UTF-8 string attribute (h5py reads it as str); invalid UTF-8 in `value` is
// replaced (cases/safe_text.h).
bool write_string_attr(hid_t obj, const char* name, const std::string& value);

// --- typed datasets -------------------------------------------------------------------------

// How a case dtype is stored: bf16 and fp16 as their uint16 bit patterns (lossless, and every
// HDF5 reader has uint16), everything else as itself, little-endian.
struct Storage {
  hid_t file_type;
  hid_t mem_type;
  H5T_class_t cls;
  size_t size;
  H5T_sign_t sign;  // integers only
};
Storage storage_of(cases::DType t);
// A stored type in words for errors, e.g. "16-bit unsigned integer".
std::string describe_type(hid_t type);
// Whether a stored type is the storage of `t` (class, size, sign).
bool matches_storage(hid_t type, cases::DType t);
// An IEEE binary16 float type (how numpy's float16 arrives through h5py).
bool is_ieee_half(hid_t type);

// Attributes: scalar string, list of strings, integers (scalar or a list). Errors name `where`.
Status write_attr_string(hid_t obj, const char* name, const std::string& value);
Status write_attr_strings(hid_t obj, const char* name, const std::vector<std::string>& values);
Status write_attr_ints(hid_t obj, const char* name, const std::vector<int64_t>& values,
                       bool scalar);
Status write_attr_int(hid_t obj, const char* name, int64_t value);
StatusOr<std::string> read_attr_string(hid_t obj, const std::string& where, const char* name);
StatusOr<std::vector<std::string>> read_attr_strings(hid_t obj, const std::string& where,
                                                     const char* name);
StatusOr<std::vector<int64_t>> read_attr_ints(hid_t obj, const std::string& where,
                                              const char* name);
StatusOr<int64_t> read_attr_int(hid_t obj, const std::string& where, const char* name);

// --- groups and datasets ----------------------------------------------------------------------

// A group without timestamps (reproducible bytes), children indexed by creation order.
StatusOr<Hid> create_group(hid_t parent, const std::string& name);
// Writes one dataset in the storage of `dtype`; with `checksum` a "sha256" attribute, with
// `dtype_attr` a "dtype" attribute.
Status write_dataset(hid_t group, const std::string& name, cases::DType dtype,
                     const std::vector<int64_t>& shape, const void* data, size_t nbytes,
                     bool checksum, bool dtype_attr);
// Shape of a dataset of `elem`-byte elements, refusing implausible extents (a corrupted header)
// before any allocation.
StatusOr<std::vector<int64_t>> dataset_shape(hid_t d, const std::string& where, size_t elem);
// Groups and datasets under `g`, in creation order when the file tracks it, else by name.
StatusOr<std::vector<std::string>> list_links(hid_t g, const std::string& where);
// The link `name` in `parent` must be a hard link (not soft, not to another file).
Status require_hard_link(hid_t parent, const std::string& name, const std::string& where);
// Opens the group `name` (a hard link) of `parent`.
StatusOr<Hid> open_group(hid_t parent, const std::string& name, const std::string& where);
// Bytes for messages: "1.5 MB".
std::string size_text(double bytes);
// How a dataset is stored, checked before a byte of it is read: contiguous or chunked in the file
// itself, with filters this library decodes and chunks of at most `max_chunk` bytes (their size
// in *chunk_bytes, 0 when contiguous).
Status check_storage(hid_t d, const std::string& where, size_t elem, uint64_t max_chunk,
                     uint64_t* chunk_bytes);
// The reason a read of `d` failed: an unavailable (optional) filter, or what HDF5 says.
std::string read_failure(hid_t d);

}  // namespace deltacheck::golden
