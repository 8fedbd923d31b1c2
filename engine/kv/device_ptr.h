// An address in a Backend's memory (engine/model/backend.h): the handle the
// engine, the forward pass and the KV cache hold for weights, scratch and the
// KV pool, which host code passes to backend calls but cannot dereference
// (no operator*, no operator[]). The CPU backend's addresses are host
// pointers; a device backend's are device addresses. A value type, free to
// copy; thread-compatible. Lives in engine/kv so that the KV cache may hold
// its pool by one.
#ifndef TANDEM_ENGINE_KV_DEVICE_PTR_H_
#define TANDEM_ENGINE_KV_DEVICE_PTR_H_

#include <cstdint>
#include <type_traits>

namespace tandem::engine {

template <typename T>
class DevicePtr {
 public:
  DevicePtr() = default;
  // For backends only: wraps an address of the backend's own memory.
  explicit DevicePtr(T* address) : address_(address) {}
  // DevicePtr<T> converts to DevicePtr<const T>, as T* does to const T*.
  template <typename U>
    requires(!std::is_same_v<U, T> && std::is_convertible_v<U*, T*>)
  DevicePtr(DevicePtr<U> other)  // NOLINT: implicit, as for raw pointers
      : address_(other.backend_address()) {}

  // `elements` of T further on.
  DevicePtr operator+(int64_t elements) const { return DevicePtr(address_ + elements); }
  // The same address seen as another element type (bytes <-> floats).
  template <typename U>
  DevicePtr<U> As() const {
    return DevicePtr<U>(reinterpret_cast<U*>(address_));
  }
  bool is_null() const { return address_ == nullptr; }

  // For backends only: the address in the backend's own address space. Host
  // code must not dereference it (the tests' fake device faults if it does).
  T* backend_address() const { return address_; }

  friend bool operator==(DevicePtr a, DevicePtr b) { return a.address_ == b.address_; }

 private:
  T* address_ = nullptr;
};

}  // namespace tandem::engine

#endif  // TANDEM_ENGINE_KV_DEVICE_PTR_H_
