// File I/O that never leaves a half-written file under its final name, and read-only
// memory maps for token shards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nanogpt {

std::string read_file(const std::string& path);

// Writes to a temporary name in the same directory, fsyncs, then renames over `path`, so a
// reader sees either the old file or the complete new one.
void write_file_atomic(const std::string& path, std::string_view contents);

// Streaming form of write_file_atomic for outputs too large to hold in memory.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(const std::string& path);
  ~AtomicFileWriter();  // Removes the temporary if commit() was never reached.
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  // Rewrites bytes already written (a header whose count is known only at the end).
  void write_at(uint64_t offset, const void* data, size_t bytes);
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
};

// Prefix shared by every temporary file we create; lets a later run sweep up after a crash.
inline constexpr std::string_view kTempMarker = ".tmp-";

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

bool file_exists(const std::string& path);
// Sorted list of paths matching a shell glob; empty if none.
std::vector<std::string> glob_sorted(const std::string& pattern);

}  // namespace nanogpt
