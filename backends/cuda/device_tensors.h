// Device memory for the CUDA backend: owners of a stream and of device buffers whose every CUDA
// call comes back as a Status, and device mirrors of the runner's host tensors.
//
// A mirror holds a tensor's whole host storage, guard bands and poison included: the backend
// uploads the outputs as the runner allocated them (NaN-poisoned body, sentinel guards), the
// kernels write into the body, and the download brings back every byte. So an element a kernel
// never wrote is still poisoned on the host and a write just outside a tensor changes its guard
// band: the runner's integrity checks see device writes exactly as they see host writes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "cases/tensor.h"
#include "core/status.h"

namespace deltacheck::backends::cuda_backend {

// A non-blocking stream of its own, so concurrent cases (--jobs) never wait on each other's work.
class Stream {
 public:
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  Status create();
  cudaStream_t get() const { return stream_; }
  // Waits for everything queued; the first asynchronous error of the stream's work comes here.
  Status synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
  bool created_ = false;
};

// Device memory owned by the backend for the duration of one call.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer();

  // `what` names the buffer in the error ("cudaMalloc of 'q' (4096 bytes): ...").
  Status allocate(size_t bytes, const std::string& what);
  // Allocates and queues a copy of `bytes` host bytes on `stream`.
  Status upload(const void* host, size_t bytes, cudaStream_t stream, const std::string& what);
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// One host tensor's storage on the device.
class DeviceTensor {
 public:
  // Allocates and queues the copy of t's storage (guards included) on `stream`.
  Status upload(const cases::Tensor& t, cudaStream_t stream);
  // Queues the copy of the whole device storage back into t, which must be the tensor uploaded
  // (same storage size). The host bytes are valid after the stream is synchronized.
  Status download(cases::Tensor& t, cudaStream_t stream) const;

  const std::string& name() const { return name_; }
  size_t nbytes() const { return nbytes_; }  // of the body
  void* data() const { return static_cast<uint8_t*>(buffer_.get()) + guard_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data());
  }

 private:
  std::string name_;
  DeviceBuffer buffer_;
  size_t guard_ = 0, nbytes_ = 0;
};

// Device mirrors of every tensor of a TensorMap, by name.
class DeviceTensors {
 public:
  Status upload(const cases::TensorMap& m, cudaStream_t stream);
  // Queues the download of every mirror into the tensor of the same name.
  Status download(cases::TensorMap& m, cudaStream_t stream) const;
  const DeviceTensor* find(const std::string& name) const;
  // Throws std::out_of_range naming the tensor (a missing input is the operation's bug).
  const DeviceTensor& at(const std::string& name) const;

 private:
  std::deque<DeviceTensor> tensors_;
};

// One call of a backend op on the device: a stream of its own, device mirrors of `in` and `out`,
// `launch` queues the kernels on them, then (after waiting for the queued work whatever happened:
// a kernel's asynchronous failure surfaces there) the outputs come back into `out`.
using Launch =
    std::function<Status(const DeviceTensors& in, const DeviceTensors& out, cudaStream_t stream)>;
Status run_on_device(const cases::TensorMap& in, cases::TensorMap& out, const Launch& launch);

}  // namespace deltacheck::backends::cuda_backend
