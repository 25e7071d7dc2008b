// Fuzz target: the reader of an external program's outputs ({out}, golden/format.h): outputs of
// every dtype and fixed shapes, as the runner allocates them, filled from a file written by a
// fuzzed recipe (write_recipe below). Every file either fills them or is rejected with a Status:
// no crash, no exception, no undefined behaviour.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "golden/format.h"

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

// An {out} file as a recipe: datasets named like the outputs or not, of fuzzed HDF5 types
// (including IEEE half, as h5py writes numpy float16), shapes, values and dtype attributes, and
// perhaps an "unsupported" attribute. The file is valid HDF5: the reader's checks are fuzzed.
void write_recipe(FuzzedDataProvider& in, const std::string& path) {
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
    hid_t d = H5Dcreate2(f, name.c_str(), type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
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
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  write_recipe(in, scratch_path());
  TensorMap outputs = expected_outputs();
  (void)deltacheck::golden::read_output_file(scratch_path(), outputs);
  return 0;
}
