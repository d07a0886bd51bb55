// The safetensors format (https://github.com/huggingface/safetensors), used for checkpoints and
// for golden data exported from the PyTorch reference.
//
// Layout: u64 little-endian header length N, N bytes of UTF-8 JSON, then the data buffer.
// The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the start of the data buffer) and may hold "__metadata__": {string: string}.
// Tensor data is little-endian and row-major.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/file_io.hpp"

namespace nanogpt {

// Byte-sized element types of the reference implementation. Sub-byte types (F4, F6_*) are not
// supported because their tensors are not byte-addressable.
enum class Dtype : uint8_t {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kF8E8M0,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kC64,
};

// The spelling used in the header ("F32", "F8_E4M3", ...).
std::string_view dtype_name(Dtype dtype);
std::optional<Dtype> dtype_from_name(std::string_view name);
size_t dtype_size(Dtype dtype);

// Product of the dimensions; the empty shape is a scalar with one element.
uint64_t shape_numel(const std::vector<int64_t>& shape);
// "[2, 3]", for error messages.
std::string shape_string(const std::vector<int64_t>& shape);

// Collects tensors and writes them in one atomic step. Tensors are laid out in sorted-name
// order; the header is compact JSON padded with spaces to a multiple of 8 bytes, as the
// reference writer does, so the data buffer starts 8-byte aligned.
class SafetensorsWriter {
 public:
  void set_metadata(const std::string& key, const std::string& value);

  // Copies `bytes`, which must hold exactly numel(shape) * dtype_size(dtype) bytes.
  void add(const std::string& name, Dtype dtype, const std::vector<int64_t>& shape,
           std::span<const uint8_t> bytes);
  // Like add() but keeps only a view: `bytes` must stay alive until write() returns. For
  // checkpoints, where copying every parameter would double peak memory.
  void add_borrowed(const std::string& name, Dtype dtype, const std::vector<int64_t>& shape,
                    std::span<const uint8_t> bytes);

  void add_f32(const std::string& name, const std::vector<int64_t>& shape,
               std::span<const float> values);
  void add_f64(const std::string& name, const std::vector<int64_t>& shape,
               std::span<const double> values);
  void add_i32(const std::string& name, const std::vector<int64_t>& shape,
               std::span<const int32_t> values);
  void add_i64(const std::string& name, const std::vector<int64_t>& shape,
               std::span<const int64_t> values);

  size_t size() const { return tensors_.size(); }

  // Writes via a temporary file and rename, so `path` is never seen half-written.
  void write(const std::string& path) const;
  // The complete file contents; what write() puts on disk.
  std::string serialize() const;

 private:
  struct Entry {
    Dtype dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> owned;
    std::optional<std::span<const uint8_t>> borrowed;
    // Resolved on use rather than stored, so copying the writer cannot leave a view into the
    // source's buffers.
    std::span<const uint8_t> bytes() const { return borrowed ? *borrowed : owned; }
  };
  Entry& insert(const std::string& name, Dtype dtype, const std::vector<int64_t>& shape,
                size_t byte_count);
  std::string header() const;

  std::map<std::string, std::string> metadata_;
  std::map<std::string, Entry> tensors_;
};

// A tensor inside a mapped file; `bytes` points into the mapping and is valid while the reader
// lives. It may be unaligned for its dtype (the writer does not pad between tensors), so copy
// with memcpy rather than casting the pointer.
struct TensorView {
  std::string_view name;
  Dtype dtype;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;

  uint64_t numel() const { return shape_numel(shape); }
};

// Whether an accessor may change float precision. Golden data saved in the wrong precision is
// an error unless the caller explicitly accepts the conversion.
enum class FloatConversion { kExact, kAllow };

// Validates the whole header on construction, so a file that opens is safe to index.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // Sorted.
  std::vector<std::string> names() const;
  bool contains(std::string_view name) const;
  size_t size() const { return tensors_.size(); }

  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Throws InputError naming the file and key if absent.
  const std::string& metadata_value(const std::string& key) const;

  // Throws InputError naming the file and tensor if absent.
  TensorView tensor(std::string_view name) const;

  // Element-wise copies that check the dtype and, when given, the shape.
  // F64 is accepted (and rounded) only with FloatConversion::kAllow.
  std::vector<float> read_f32(std::string_view name,
                              FloatConversion conversion = FloatConversion::kExact) const;
  std::vector<float> read_f32(std::string_view name, const std::vector<int64_t>& expected_shape,
                              FloatConversion conversion = FloatConversion::kExact) const;
  // F32 is accepted (and widened) only with FloatConversion::kAllow.
  std::vector<double> read_f64(std::string_view name,
                               FloatConversion conversion = FloatConversion::kExact) const;
  std::vector<double> read_f64(std::string_view name, const std::vector<int64_t>& expected_shape,
                               FloatConversion conversion = FloatConversion::kExact) const;
  std::vector<int32_t> read_i32(std::string_view name) const;
  std::vector<int32_t> read_i32(std::string_view name,
                                const std::vector<int64_t>& expected_shape) const;
  std::vector<int64_t> read_i64(std::string_view name) const;
  std::vector<int64_t> read_i64(std::string_view name,
                                const std::vector<int64_t>& expected_shape) const;

 private:
  struct Entry {
    Dtype dtype;
    std::vector<int64_t> shape;
    uint64_t begin;
    uint64_t end;
  };
  using Tensors = std::map<std::string, Entry, std::less<>>;
  const Tensors::value_type& find(std::string_view name) const;
  void check_shape(std::string_view name, const Entry& entry,
                   const std::vector<int64_t>* expected_shape) const;
  template <typename T>
  std::vector<T> read_as(std::string_view name, const std::vector<int64_t>* expected_shape,
                         FloatConversion conversion) const;

  MappedFile file_;
  const uint8_t* data_ = nullptr;  // start of the data buffer inside file_
  std::map<std::string, std::string> metadata_;
  Tensors tensors_;
};

}  // namespace nanogpt
