// Fuzz target: the reader of an external program's outputs ({out}, golden/exchange.h): outputs of
// every dtype and fixed shapes, as the runner allocates them, filled from a file written by a
// fuzzed recipe (write_recipe below), with fuzzed storage (chunks, filters, compact, external raw
// files, virtual datasets, soft and external links). Every file either fills them or is rejected
// with a Status: no crash, no exception, no undefined behaviour, and never data from outside the
// file.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "golden/exchange.h"

namespace {

using deltacheck::cases::DType;
using deltacheck::cases::Tensor;
using deltacheck::cases::TensorMap;

TensorMap expected_outputs() {
  TensorMap m;
  m.add(Tensor("o", DType::kBF16, {1, 5, 2, 4}));
  m.add(Tensor("final_state", DType::kF32, {2, 2, 4, 4}));
  m.add(Tensor("h", DType::kF16, {3}));
  m.add(Tensor("cu_seqlens", DType::kI64, {3}));
  m.add(Tensor("mask", DType::kU8, {1, 1, 2, 3}));
  m.add(Tensor("slots", DType::kI32, {2}));
  return m;
}

// One scratch file HDF5 can open (it cannot open a memfd through /proc/self/fd): in
// $DELTACHECK_FUZZ_SCRATCH (scripts/fuzz.sh removes it), else /dev/shm; removed at a normal exit.
const std::string& scratch_path() {
  static const std::string path = [] {
    const char* scratch = std::getenv("DELTACHECK_FUZZ_SCRATCH");  // scripts/fuzz.sh
    const char* dir = scratch ? scratch : access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::atexit([] { std::remove(scratch_path().c_str()); });
    return std::string(dir) + "/deltacheck-fuzz-out-" + std::to_string(getpid()) + ".h5";
  }();
  return path;
}

// A raw file and another HDF5 file next to the scratch file: what external raw storage, virtual
// datasets and external links in a fuzzed {out} point at (a candidate would point at
// /proc/self/environ).
const std::string& side_raw() {
  static const std::string path = scratch_path() + ".raw";
  return path;
}

// Creates dataset `name` with fuzzed storage: contiguous, chunked (fuzzed chunk shape, perhaps
// compressed, perhaps with a filter this library lacks), compact, in an external raw file, or
// virtual; or, through a link of that name, a soft link or an external link. Returns the
// dataset (or -1) and sets `outside` when the data would come from outside the file.
hid_t create_stored(FuzzedDataProvider& in, hid_t f, const std::string& name, hid_t type,
                    hid_t space, const std::vector<hsize_t>& dims, bool* outside) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  const int storage = in.ConsumeIntegralInRange(0, 6);
  std::string at = name;
  if (storage == 1 && !dims.empty()) {
    std::vector<hsize_t> chunk(dims.size());
    for (hsize_t& c : chunk) c = in.ConsumeIntegralInRange<hsize_t>(1, 16);
    std::vector<hsize_t> maxdims(dims.size(), H5S_UNLIMITED);
    H5Sset_extent_simple(space, static_cast<int>(dims.size()), dims.data(), maxdims.data());
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    if (in.ConsumeBool()) H5Pset_deflate(dcpl, 1);
    if (in.ConsumeBool()) H5Pset_filter(dcpl, 32000, H5Z_FLAG_OPTIONAL, 0, nullptr);  // lzf
  } else if (storage == 2) {
    H5Pset_layout(dcpl, H5D_COMPACT);
  } else if (storage == 3) {
    H5Pset_external(dcpl, side_raw().c_str(), 0, H5F_UNLIMITED);
    *outside = true;
  } else if (storage == 4) {
    hid_t src = H5Scopy(space);
    H5Pset_virtual(dcpl, space, (scratch_path() + ".side.h5").c_str(), "x", src);
    H5Sclose(src);
    *outside = true;
  } else if (storage >= 5) {  // the data under another name, reached through a link
    at = name + ".target";
  }
  hid_t d = H5Dcreate2(f, at.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Pclose(dcpl);
  if (storage == 5) {
    H5Lcreate_soft(at.c_str(), f, name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
  } else if (storage == 6) {
    H5Lcreate_external((scratch_path() + ".side.h5").c_str(), "x", f, name.c_str(), H5P_DEFAULT,
                       H5P_DEFAULT);
    *outside = true;
  }
  return d;
}

// An {out} file as a recipe: datasets named like the outputs or not, of fuzzed HDF5 types
// (including IEEE half, as h5py writes numpy float16), shapes, values, storage and dtype
// attributes, and perhaps an "unsupported" attribute. The file is valid HDF5: the reader's checks
// are fuzzed. Sets `outside` when an output's data would come from outside the file.
void write_recipe(FuzzedDataProvider& in, const std::string& path, bool* outside) {
  const TensorMap want = expected_outputs();
  hid_t half = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(half, 15, 10, 5, 0, 10);
  H5Tset_size(half, 2);
  H5Tset_ebias(half, 15);
  const hid_t types[] = {H5T_IEEE_F32LE, H5T_STD_U16LE, half,         H5T_IEEE_F64LE,
                         H5T_STD_I32LE,  H5T_STD_I64LE, H5T_STD_U8LE, H5T_STD_I16LE,
                         H5T_STD_U64LE,  H5T_STD_I8LE};
  const char* const dtypes[] = {"fp32", "bf16", "fp16", "fp64", "int32", "int64", "uint8", "?"};
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) std::abort();
  for (int i = in.ConsumeIntegralInRange(0, 8); i > 0; --i) {
    const bool known = in.ConsumeBool();
    const Tensor& like = want.all()[in.ConsumeIntegralInRange<size_t>(0, want.all().size() - 1)];
    const std::string name = known ? like.name() : in.ConsumeRandomLengthString(16);
    if (name.empty() || H5Lexists(f, name.c_str(), H5P_DEFAULT) != 0) continue;
    const hid_t type = types[in.ConsumeIntegralInRange(0, 9)];
    std::vector<hsize_t> dims;
    if (in.ConsumeBool()) {
      for (int64_t d : like.shape()) dims.push_back(static_cast<hsize_t>(d));
    } else {
      dims.resize(in.ConsumeIntegralInRange<size_t>(0, 4));
      for (hsize_t& d : dims) d = in.ConsumeIntegralInRange<hsize_t>(0, 12);
    }
    hsize_t n = 1;
    for (hsize_t d : dims) n *= d;
    std::vector<uint8_t> bytes = in.ConsumeBytes<uint8_t>(n * H5Tget_size(type));
    bytes.resize(n * H5Tget_size(type));
    hid_t s = dims.empty() ? H5Screate(H5S_SCALAR)
                           : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    bool away = false;
    hid_t d = create_stored(in, f, name, type, s, dims, &away);
    *outside = *outside || (known && away);
    if (d >= 0 && !bytes.empty()) H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data());
    if (d >= 0 && in.ConsumeBool()) {
      hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, H5T_VARIABLE);
      hid_t as = H5Screate(H5S_SCALAR);
      hid_t a = H5Acreate2(d, "dtype", t, as, H5P_DEFAULT, H5P_DEFAULT);
      const char* v = dtypes[in.ConsumeIntegralInRange(0, 7)];
      if (a >= 0) H5Awrite(a, t, &v);
      H5Aclose(a);
      H5Sclose(as);
      H5Tclose(t);
    }
    H5Dclose(d);
    H5Sclose(s);
  }
  if (in.ConsumeBool()) {  // the program declines, with a string or something else
    hid_t s = H5Screate(H5S_SCALAR);
    const bool text = in.ConsumeBool();
    hid_t t = H5Tcopy(text ? H5T_C_S1 : H5T_STD_I32LE);
    if (text) H5Tset_size(t, H5T_VARIABLE);
    hid_t a = H5Acreate2(f, "unsupported", t, s, H5P_DEFAULT, H5P_DEFAULT);
    const std::string why = in.ConsumeRandomLengthString(64);
    const char* p = why.c_str();
    const int32_t number = 7;
    if (a >= 0) H5Awrite(a, t, text ? static_cast<const void*>(&p) : &number);
    H5Aclose(a);
    H5Tclose(t);
    H5Sclose(s);
  }
  H5Fclose(f);
  H5Tclose(half);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  // What outside storage points at: 4 kB of a secret, and an HDF5 file with a dataset "x".
  std::FILE* raw = std::fopen(side_raw().c_str(), "wb");
  for (int i = 0; raw && i < 4096; ++i) std::fputc("SECRET=token;"[i % 13], raw);
  if (raw) std::fclose(raw);
  const hsize_t n = 64;
  hid_t f =
      H5Fcreate((scratch_path() + ".side.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t s = H5Screate_simple(1, &n, nullptr);
  H5Dclose(H5Dcreate2(f, "x", H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  H5Sclose(s);
  H5Fclose(f);
  std::atexit([] {
    std::remove(side_raw().c_str());
    std::remove((scratch_path() + ".side.h5").c_str());
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  bool outside = false;
  write_recipe(in, scratch_path(), &outside);
  TensorMap outputs = expected_outputs();
  const deltacheck::Status st = deltacheck::golden::read_output_file(scratch_path(), outputs);
  // Data from outside the file (external raw files, virtual datasets, external links) is never
  // accepted as an output (an "unsupported" answer reads no data).
  if (st.ok() && outside) std::abort();
  return 0;
}
