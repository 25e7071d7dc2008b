// The HDF5 plumbing shared by the fixture format and the failure dumps (hdf5.h).
#include "golden/hdf5.h"

#include "cases/safe_text.h"

namespace deltacheck::golden {
namespace {

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

}  // namespace deltacheck::golden
