// Fuzz target: the golden fixture reader (golden/format.h) and the input checks behind it
// (cases/input_checks.h). The input is a recipe of edits — attributes rewritten, datasets
// replaced with other dtypes, shapes and values (checksums forged or not), links deleted or
// renamed, the input list changed — applied with the HDF5 API to one of the valid fixtures in
// fuzz/templates/. The files stay valid HDF5, so what is fuzzed is deltacheck's own validation,
// not the HDF5 library's parser (that one is contained by reading files in a child process with
// a deadline: tools/deltacheck/golden.cc). Every file must be read or rejected with a Status: no
// crash, no exception, no undefined behaviour, no allocation over the reader's memory limit.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "golden/format.h"
#include "golden/sha256.h"

namespace {

std::vector<std::vector<char>> load_templates() {
  std::vector<std::vector<char>> out;
  for (const auto& e : std::filesystem::directory_iterator(std::string(DELTACHECK_SOURCE_DIR) +
                                                           "/fuzz/templates")) {
    std::ifstream f(e.path(), std::ios::binary);
    out.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  if (out.empty()) std::abort();
  return out;
}

// One scratch file: in $DELTACHECK_FUZZ_SCRATCH (scripts/fuzz.sh removes it), else /dev/shm;
// removed at a normal exit.
const std::string& scratch_path() {
  static const std::string path = [] {
    const char* scratch = std::getenv("DELTACHECK_FUZZ_SCRATCH");  // scripts/fuzz.sh
    const char* dir = scratch ? scratch : access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::atexit([] { std::remove(scratch_path().c_str()); });
    return std::string(dir) + "/deltacheck-fuzz-fixture-" + std::to_string(getpid()) + ".h5";
  }();
  return path;
}

herr_t collect(hid_t, const char* name, const H5O_info_t* info, void* out) {
  if (info->type == H5O_TYPE_GROUP || info->type == H5O_TYPE_DATASET)
    static_cast<std::vector<std::pair<std::string, bool>>*>(out)->push_back(
        {name, info->type == H5O_TYPE_DATASET});
  return 0;
}

const char* const kStringAttrs[] = {
    "case_id", "op", "dtype", "sha256", "format", "tolerance_policy", "producer", "unsupported"};
const char* const kIntAttrs[] = {"format_version", "generator_version", "seed", "shape"};
const char* const kDtypes[] = {"fp32", "bf16", "fp16", "fp64", "int32", "int64", "uint8", "x"};
const hid_t kFileTypes[] = {H5T_IEEE_F32LE, H5T_STD_U16LE, H5T_STD_U16LE, H5T_IEEE_F64LE,
                            H5T_STD_I32LE,  H5T_STD_I64LE, H5T_STD_U8LE,  H5T_STD_I16LE};
const size_t kSizes[] = {4, 2, 2, 8, 4, 8, 1, 2};

void set_string_attr(hid_t obj, const char* name, const std::string& v) {
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  const char* p = v.c_str();
  if (a >= 0) H5Awrite(a, t, &p);
  H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
}

void set_int_attr(hid_t obj, const char* name, const std::vector<int64_t>& v, bool scalar) {
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  const hsize_t n = v.size();
  hid_t s = scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
  hid_t a = H5Acreate2(obj, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  if (a >= 0 && !v.empty()) H5Awrite(a, H5T_NATIVE_INT64, v.data());
  H5Aclose(a);
  H5Sclose(s);
}

// A new dataset at `path` (replacing what was there) with fuzzed dtype, shape and bytes.
void replace_dataset(hid_t f, const std::string& path, FuzzedDataProvider& in) {
  const size_t k = in.ConsumeIntegralInRange<size_t>(0, 7);
  const int rank = in.ConsumeIntegralInRange(0, 4);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  hsize_t n = 1;
  for (hsize_t& d : dims) n *= (d = in.ConsumeIntegralInRange<hsize_t>(0, 16));
  std::vector<uint8_t> bytes = in.ConsumeBytes<uint8_t>(n * kSizes[k]);
  bytes.resize(n * kSizes[k]);
  H5Ldelete(f, path.c_str(), H5P_DEFAULT);
  hid_t s = rank ? H5Screate_simple(rank, dims.data(), nullptr) : H5Screate(H5S_SCALAR);
  hid_t d = H5Dcreate2(f, path.c_str(), kFileTypes[k], s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (d >= 0) {
    if (!bytes.empty()) H5Dwrite(d, kFileTypes[k], H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
    set_string_attr(d, "dtype", kDtypes[in.ConsumeBool() ? k : in.ConsumeIntegralInRange(0, 7)]);
    const bool forge = in.ConsumeBool();
    set_string_attr(d, "sha256",
                    forge ? deltacheck::golden::sha256_hex(bytes.data(), bytes.size())
                          : in.ConsumeRandomLengthString(64));
  }
  H5Dclose(d);
  H5Sclose(s);
}

// Overwrites a few elements of a dataset in place, keeping its checksum right.
void poke_dataset(hid_t f, const std::string& path, FuzzedDataProvider& in) {
  hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  if (d < 0) return;
  hid_t t = H5Dget_type(d), s = H5Dget_space(d);
  const size_t es = H5Tget_size(t);
  const hssize_t n = H5Sget_simple_extent_npoints(s);
  if (n > 0 && n < (1 << 20) && es > 0 && es <= 8) {
    std::vector<uint8_t> b(static_cast<size_t>(n) * es);
    if (H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, b.data()) >= 0) {
      for (int i = in.ConsumeIntegralInRange(1, 4); i > 0; --i) {
        const size_t at = in.ConsumeIntegralInRange<size_t>(0, static_cast<size_t>(n) - 1);
        const std::vector<uint8_t> v = in.ConsumeBytes<uint8_t>(es);
        std::copy(v.begin(), v.end(), b.begin() + static_cast<std::ptrdiff_t>(at * es));
      }
      H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, b.data());
      set_string_attr(d, "sha256", deltacheck::golden::sha256_hex(b.data(), b.size()));
    }
  }
  H5Tclose(t);
  H5Sclose(s);
  H5Dclose(d);
}

void edit(hid_t f, FuzzedDataProvider& in) {
  std::vector<std::pair<std::string, bool>> objects;  // path, is a dataset
  H5Ovisit2(f, H5_INDEX_NAME, H5_ITER_INC, collect, &objects, H5O_INFO_BASIC);
  if (objects.empty()) return;
  const auto& [path, is_dataset] =
      objects[in.ConsumeIntegralInRange<size_t>(0, objects.size() - 1)];
  hid_t obj = H5Oopen(f, path.c_str(), H5P_DEFAULT);
  if (obj < 0) return;
  switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0:
      set_string_attr(obj, kStringAttrs[in.ConsumeIntegralInRange(0, 7)],
                      in.ConsumeRandomLengthString(256));
      break;
    case 1: {
      std::vector<int64_t> v(in.ConsumeIntegralInRange<size_t>(0, 5));
      for (int64_t& x : v) x = in.ConsumeIntegral<int64_t>();
      set_int_attr(obj, kIntAttrs[in.ConsumeIntegralInRange(0, 3)], v, in.ConsumeBool());
      break;
    }
    case 2:
      if (is_dataset) replace_dataset(f, path, in);
      break;
    case 3:
      if (path != ".") H5Ldelete(f, path.c_str(), H5P_DEFAULT);
      break;
    case 4:
      if (is_dataset) poke_dataset(f, path, in);
      break;
    case 5:
      if (path != ".") {
        const std::string to = in.ConsumeRandomLengthString(128);
        if (!to.empty() && to.find('/') == std::string::npos && to != ".")
          H5Lmove(f, path.c_str(), f, to.c_str(), H5P_DEFAULT, H5P_DEFAULT);
      }
      break;
    case 6: {
      hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, H5T_VARIABLE);
      std::vector<std::string> names(in.ConsumeIntegralInRange<size_t>(0, 9));
      for (std::string& n : names) n = in.ConsumeRandomLengthString(12);
      std::vector<const char*> p;
      for (const std::string& n : names) p.push_back(n.c_str());
      const hsize_t count = names.size();
      hid_t s = H5Screate_simple(1, &count, nullptr);
      if (H5Aexists(obj, "input_names") > 0) H5Adelete(obj, "input_names");
      hid_t a = H5Acreate2(obj, "input_names", t, s, H5P_DEFAULT, H5P_DEFAULT);
      if (a >= 0 && !p.empty()) H5Awrite(a, t, p.data());
      H5Aclose(a);
      H5Sclose(s);
      H5Tclose(t);
      break;
    }
    default:
      if (!is_dataset) {  // a dataset where a group or a scalar should be
        const std::string at = path + "/" + in.ConsumeRandomLengthString(16);
        replace_dataset(f, at, in);
      }
      break;
  }
  H5Oclose(obj);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::vector<char>> templates = load_templates();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  FuzzedDataProvider in(data, size);
  const std::vector<char>& t =
      templates[in.ConsumeIntegralInRange<size_t>(0, templates.size() - 1)];
  {
    std::ofstream f(scratch_path(), std::ios::binary | std::ios::trunc);
    f.write(t.data(), static_cast<std::streamsize>(t.size()));
  }
  hid_t f = H5Fopen(scratch_path().c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) std::abort();
  for (int i = in.ConsumeIntegralInRange(0, 6); i > 0 && in.remaining_bytes() > 0; --i) edit(f, in);
  H5Fclose(f);

  deltacheck::golden::FixtureReader reader;
  reader.set_max_bytes(int64_t{16} << 20);
  if (!reader.open(scratch_path()).ok()) return 0;
  for (size_t i = 0; i < reader.case_groups().size() && i < 8; ++i) (void)reader.read(i);
  return 0;
}
