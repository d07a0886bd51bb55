#include "runtime/workspace.hpp"

#include <algorithm>
#include <cstring>

#include "runtime/aligned_memory.hpp"

namespace nanogpt {

namespace {

struct LookupKey {
  std::thread::id thread;
  std::string_view slot;
};

thread_local Workspace* g_current_override = nullptr;

}  // namespace

void Workspace::Free::operator()(std::byte* p) const {
  free_aligned(p);
}

Workspace::Workspace(std::string name) : name_(std::move(name)) {}

Workspace::~Workspace() = default;

Workspace::Slot& Workspace::slot_of_this_thread(std::string_view slot) {
  const LookupKey key{std::this_thread::get_id(), slot};
  auto it = slots_.find(key);
  if (it == slots_.end()) it = slots_.emplace(Key{key.thread, std::string(slot)}, Slot{}).first;
  return it->second;
}

void Workspace::grow(Buffer& buffer, size_t bytes, bool zero_new) {
  if (bytes <= buffer.bytes) return;
  // Freed before the larger one is taken, so growing never holds both.
  bytes_held_ -= buffer.bytes;
  buffer.data.reset();
  buffer.bytes = 0;
  buffer.data.reset(static_cast<std::byte*>(allocate_aligned(bytes)));
  if (zero_new) std::memset(buffer.data.get(), 0, bytes);
  buffer.bytes = bytes;
  bytes_held_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, bytes_held_);
}

std::byte* Workspace::get(std::string_view slot, size_t bytes, bool zero_new) {
  return lanes(slot, 1, bytes, zero_new)[0];
}

std::span<std::byte* const> Workspace::lanes(std::string_view slot, int count, size_t bytes,
                                             bool zero_new) {
  const size_t n = static_cast<size_t>(std::max(count, 1));
  std::lock_guard<std::mutex> lock(mutex_);
  Slot& s = slot_of_this_thread(slot);
  if (s.buffers.size() < n) s.buffers.resize(n);
  s.pointers.resize(s.buffers.size());
  // Even an empty request gets a real (one-line) buffer, so every lane has an address.
  const size_t want = std::max<size_t>(bytes, kCacheLine);
  for (size_t i = 0; i < n; ++i) {
    grow(s.buffers[i], want, zero_new);
    s.pointers[i] = s.buffers[i].data.get();
  }
  return {s.pointers.data(), n};
}

size_t Workspace::bytes_held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_held_;
}

size_t Workspace::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_bytes_;
}

void Workspace::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_bytes_ = bytes_held_;
}

void Workspace::release() {
  std::lock_guard<std::mutex> lock(mutex_);
  slots_.clear();
  bytes_held_ = 0;
}

Workspace& Workspace::process_default() {
  static Workspace workspace("process default");
  return workspace;
}

Workspace& Workspace::current() {
  return g_current_override != nullptr ? *g_current_override : process_default();
}

Workspace::Use::Use(Workspace& workspace) : previous_(g_current_override) {
  g_current_override = &workspace;
}

Workspace::Use::~Use() {
  g_current_override = previous_;
}

}  // namespace nanogpt
