// The HDF5 C API as deltacheck uses it everywhere (fixtures, {in}/{out}, failure dumps): one
// RAII handle type that closes every identifier on every path, the library kept quiet (errors are
// deltacheck's one-line messages), and a short readable reason from HDF5's error stack.
//
// A file whose close fails (a full disk: HDF5 cannot flush it) stays half-open inside the library,
// and the library's own exit handler then crashes closing it again (SIGSEGV in H5F__close_cb).
// So the exit handler is never installed: every file deltacheck opens is closed by its Hid, and a
// file that cannot be closed is a temporary one that is removed anyway.
#pragma once

#include <hdf5.h>

#include <string>

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

}  // namespace deltacheck::golden
