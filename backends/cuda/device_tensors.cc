// Device buffers and host-tensor mirrors for the CUDA backend (see device_tensors.h).
#include "backends/cuda/device_tensors.h"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

#include "kernels/cuda/device.h"

namespace deltacheck::backends::cuda_backend {

using kernels::cuda::cuda_status;

Stream::~Stream() {
  if (created_) (void)cudaStreamDestroy(stream_);
}

Status Stream::create() {
  if (created_) return Status::Ok();
  if (Status st = cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                              "cudaStreamCreateWithFlags");
      !st.ok())
    return st;
  created_ = true;
  return Status::Ok();
}

Status Stream::synchronize() const {
  return cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (ptr_) (void)cudaFree(ptr_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) (void)cudaFree(ptr_);
}

Status DeviceBuffer::allocate(size_t bytes, const std::string& what) {
  if (ptr_) {
    (void)cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  // cudaMalloc(0) hands back no pointer; one byte keeps "allocated" and "non-null" the same.
  const std::string label = fmt::format("cudaMalloc of '{}' ({} bytes)", what, bytes);
  if (Status st = cuda_status(cudaMalloc(&ptr_, bytes == 0 ? 1 : bytes), label.c_str()); !st.ok()) {
    ptr_ = nullptr;
    return st;
  }
  bytes_ = bytes;
  return Status::Ok();
}

Status DeviceBuffer::upload(const void* host, size_t bytes, cudaStream_t stream,
                            const std::string& what) {
  if (Status st = allocate(bytes, what); !st.ok()) return st;
  if (bytes == 0) return Status::Ok();
  const std::string label = "copy of '" + what + "' to the device";
  return cuda_status(cudaMemcpyAsync(ptr_, host, bytes, cudaMemcpyHostToDevice, stream),
                     label.c_str());
}

Status DeviceTensor::upload(const cases::Tensor& t, cudaStream_t stream) {
  name_ = t.name();
  guard_ = t.guard_bytes();
  nbytes_ = t.nbytes();
  return buffer_.upload(t.storage().data(), t.storage().size(), stream, t.name());
}

Status DeviceTensor::download(cases::Tensor& t, cudaStream_t stream) const {
  if (t.storage().size() != buffer_.bytes() || t.guard_bytes() != guard_)
    return Status::Internal(fmt::format("download of '{}': host tensor has {} bytes, device {}",
                                        name_, t.storage().size(), buffer_.bytes()));
  if (buffer_.bytes() == 0) return Status::Ok();
  // The host storage starts guard_bytes() before data(); the tensor API exposes it read-only.
  void* host = static_cast<uint8_t*>(t.data()) - t.guard_bytes();
  const std::string label = "copy of '" + name_ + "' to the host";
  return cuda_status(
      cudaMemcpyAsync(host, buffer_.get(), buffer_.bytes(), cudaMemcpyDeviceToHost, stream),
      label.c_str());
}

Status DeviceTensors::upload(const cases::TensorMap& m, cudaStream_t stream) {
  for (const cases::Tensor& t : m.all()) {
    if (Status st = tensors_.emplace_back().upload(t, stream); !st.ok()) return st;
  }
  return Status::Ok();
}

Status DeviceTensors::download(cases::TensorMap& m, cudaStream_t stream) const {
  for (const DeviceTensor& d : tensors_) {
    cases::Tensor* t = m.find(d.name());
    if (!t) return Status::Internal("download of '" + d.name() + "': no such host tensor");
    if (Status st = d.download(*t, stream); !st.ok()) return st;
  }
  return Status::Ok();
}

const DeviceTensor* DeviceTensors::find(const std::string& name) const {
  for (const DeviceTensor& d : tensors_)
    if (d.name() == name) return &d;
  return nullptr;
}

const DeviceTensor& DeviceTensors::at(const std::string& name) const {
  if (const DeviceTensor* d = find(name)) return *d;
  throw std::out_of_range("no device tensor '" + name + "'");
}

Status run_on_device(const cases::TensorMap& in, cases::TensorMap& out, const Launch& launch) {
  Stream stream;
  if (Status st = stream.create(); !st.ok()) return st;
  DeviceTensors din, dout;
  if (Status st = din.upload(in, stream.get()); !st.ok()) return st;
  if (Status st = dout.upload(out, stream.get()); !st.ok()) return st;
  const Status launched = launch(din, dout, stream.get());
  const Status synced = stream.synchronize();  // before the buffers are freed
  if (!launched.ok()) return launched;
  if (!synced.ok()) return synced;
  if (Status st = dout.download(out, stream.get()); !st.ok()) return st;
  return stream.synchronize();
}

}  // namespace deltacheck::backends::cuda_backend
