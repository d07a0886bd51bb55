// Scratch memory with an owner: the buffers kernels keep between calls (packed GEMM panels,
// panel flags, accumulator tiles, the fused loss's logits) belong to a named Workspace that
// reports what it holds and frees it with its owner, instead of to grow-only thread_locals that
// nobody can measure or release.
//
// Who owns one: the model owns one for its kernels, a benchmark or test its own; code with no
// owner gets Workspace::process_default(). Kernels take the workspace from
// Workspace::current(): the calling thread's innermost Workspace::Use scope, else the process
// default (the same pattern as ThreadPool::Use):
//
//     Workspace ws("model");
//     { Workspace::Use use(ws); gemm(...); }   // gemm's buffers come from, and stay in, ws
//     ws.bytes_held(); ws.peak_bytes(); ws.release();
//
// Inside a kernel, buffers are named by a slot (a short string constant of the kernel's) and
// belong to the thread that asks, so two threads sharing a workspace never share a buffer:
//
//     Workspace& ws = Workspace::current();
//     float* packed = ws.get<float>("gemm.packed_a", n);           // the calling thread's
//     std::span<std::byte* const> tiles = ws.lanes("gemm.tile", pool.size(), bytes);
//     pool.parallel_for(tasks, [&](size_t t, int worker) { use(tiles[worker]); });
//
// Pool workers do not see the caller's Use scope (it is per thread), so a kernel takes its
// workers' buffers on the calling thread, one lane per worker, and passes them into the worker
// lambda; workers never call into the workspace.
//
// A buffer is 64-byte aligned, grows when asked for more, never shrinks, and keeps its
// contents between calls unless it grows (a grown buffer's contents are unspecified, or zero if
// asked). A pointer stays valid until the same thread asks for the same slot with more bytes
// or more lanes, or release(). A thread's buffers stay in the workspace after the thread exits,
// until release() or the workspace's destruction. All members are thread-safe.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace nanogpt {

class Workspace {
 public:
  explicit Workspace(std::string name);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  const std::string& name() const { return name_; }

  // The calling thread's buffer `slot`, at least `bytes` long (zeroed when it grows, if
  // zero_new).
  std::byte* get(std::string_view slot, size_t bytes, bool zero_new = false);
  template <class T>
  T* get(std::string_view slot, size_t count, bool zero_new = false) {
    return reinterpret_cast<T*>(get(slot, count * sizeof(T), zero_new));
  }

  // `count` buffers of at least `bytes` each under the calling thread's `slot`, one per lane
  // (lane w for pool worker w), valid as the buffers are. Lane 0 is get(slot).
  std::span<std::byte* const> lanes(std::string_view slot, int count, size_t bytes,
                                    bool zero_new = false);

  // Bytes of buffers held now, and the most held at once since construction or reset_peak().
  size_t bytes_held() const;
  size_t peak_bytes() const;
  void reset_peak();

  // Frees every buffer. No kernel may be using this workspace meanwhile.
  void release();

  // The workspace of code that has no owner; lives until the process exits.
  static Workspace& process_default();
  // The workspace kernels use: the calling thread's innermost Use scope, else process_default().
  static Workspace& current();
  class Use {
   public:
    explicit Use(Workspace& workspace);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    Workspace* previous_;
  };

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  struct Buffer {
    std::unique_ptr<std::byte, Free> data;
    size_t bytes = 0;
  };
  // The lanes of one slot of one thread; pointers mirrors buffers for the spans handed out.
  struct Slot {
    std::vector<Buffer> buffers;
    std::vector<std::byte*> pointers;
  };
  struct Key {
    std::thread::id thread;
    std::string slot;
  };
  struct KeyLess {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      if (a.thread != b.thread) return a.thread < b.thread;
      return std::string_view(a.slot) < std::string_view(b.slot);
    }
  };

  Slot& slot_of_this_thread(std::string_view slot);
  void grow(Buffer& buffer, size_t bytes, bool zero_new);

  std::string name_;
  mutable std::mutex mutex_;
  std::map<Key, Slot, KeyLess> slots_;
  size_t bytes_held_ = 0;
  size_t peak_bytes_ = 0;
};

}  // namespace nanogpt
