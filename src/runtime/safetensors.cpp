#include "runtime/safetensors.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <type_traits>
#include <utility>

#include "runtime/error.hpp"

namespace nanogpt {

// The format is little-endian; reading it by memcpy is only correct on a little-endian host.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

namespace {

using nlohmann::json;

// Same limit as the reference reader: a larger header is almost certainly a corrupt length
// field, and refusing it avoids parsing gigabytes of garbage as JSON.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr std::string_view kCorruptFix =
    "the file is truncated or corrupt, or was not written by a safetensors writer; re-export it";

struct DtypeInfo {
  Dtype dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DtypeInfo, 17> kDtypes = {{
    {Dtype::kBool, "BOOL", 1},
    {Dtype::kU8, "U8", 1},
    {Dtype::kI8, "I8", 1},
    {Dtype::kF8E5M2, "F8_E5M2", 1},
    {Dtype::kF8E4M3, "F8_E4M3", 1},
    {Dtype::kF8E8M0, "F8_E8M0", 1},
    {Dtype::kI16, "I16", 2},
    {Dtype::kU16, "U16", 2},
    {Dtype::kF16, "F16", 2},
    {Dtype::kBF16, "BF16", 2},
    {Dtype::kI32, "I32", 4},
    {Dtype::kU32, "U32", 4},
    {Dtype::kF32, "F32", 4},
    {Dtype::kF64, "F64", 8},
    {Dtype::kI64, "I64", 8},
    {Dtype::kU64, "U64", 8},
    {Dtype::kC64, "C64", 8},
}};

const DtypeInfo& info(Dtype dtype) {
  for (const auto& d : kDtypes) {
    if (d.dtype == dtype) return d;
  }
  throw Error("unknown Dtype value " + std::to_string(static_cast<int>(dtype)));
}

std::string in_quotes(std::string_view s) {
  return "'" + std::string(s) + "'";
}

[[noreturn]] void fail_file(const std::string& path, const std::string& what,
                            std::string_view fix = kCorruptFix) {
  throw InputError("safetensors file '" + path + "': " + what + "; " + std::string(fix));
}

[[noreturn]] void fail_tensor(const std::string& path, std::string_view name,
                              const std::string& what, std::string_view fix = kCorruptFix) {
  fail_file(path, "tensor " + in_quotes(name) + ": " + what, fix);
}

// Returns false on overflow.
bool checked_byte_count(const std::vector<int64_t>& shape, size_t element_size, uint64_t* out) {
  uint64_t n = element_size;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  *out = n;
  return true;
}

// Tests the string survives JSON serialization (nlohmann rejects invalid UTF-8 on dump).
void require_utf8(const std::string& s, const std::string& what) {
  try {
    (void)json(s).dump();
  } catch (const json::exception&) {
    throw InputError(what + " " + in_quotes(s) +
                     " is not valid UTF-8; safetensors headers are UTF-8 "
                     "JSON, so rename it");
  }
}

std::string json_type(const json& j) {
  return j.type_name();
}

template <typename T>
std::span<const uint8_t> byte_span(std::span<const T> values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size_bytes()};
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

std::string_view dtype_name(Dtype dtype) {
  return info(dtype).name;
}

std::optional<Dtype> dtype_from_name(std::string_view name) {
  for (const auto& d : kDtypes) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

size_t dtype_size(Dtype dtype) {
  return info(dtype).size;
}

uint64_t shape_numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// ---------------------------------------------------------------------------------------------
// Writer

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  require_utf8(key, "metadata key");
  require_utf8(value, "metadata value for key " + in_quotes(key) + ":");
  metadata_[key] = value;
}

SafetensorsWriter::Entry& SafetensorsWriter::insert(const std::string& name, Dtype dtype,
                                                    const std::vector<int64_t>& shape,
                                                    size_t byte_count) {
  if (name == kMetadataKey) {
    throw InputError(
        "cannot add a tensor named '__metadata__': the safetensors header reserves "
        "that key for metadata; choose another name");
  }
  require_utf8(name, "tensor name");
  if (tensors_.count(name) != 0) {
    throw InputError("tensor " + in_quotes(name) +
                     " was added twice to the same safetensors file; "
                     "each name must be unique");
  }
  uint64_t expected = 0;
  if (!checked_byte_count(shape, dtype_size(dtype), &expected)) {
    throw InputError("tensor " + in_quotes(name) + " has invalid shape " + shape_string(shape) +
                     " (negative or overflowing dimensions)");
  }
  if (expected != byte_count) {
    throw InputError("tensor " + in_quotes(name) + ": shape " + shape_string(shape) + " of " +
                     std::string(dtype_name(dtype)) + " needs " + std::to_string(expected) +
                     " bytes but " + std::to_string(byte_count) + " were given");
  }
  Entry& e = tensors_[name];
  e.dtype = dtype;
  e.shape = shape;
  return e;
}

void SafetensorsWriter::add(const std::string& name, Dtype dtype, const std::vector<int64_t>& shape,
                            std::span<const uint8_t> bytes) {
  Entry& e = insert(name, dtype, shape, bytes.size());
  e.owned.assign(bytes.begin(), bytes.end());
}

void SafetensorsWriter::add_borrowed(const std::string& name, Dtype dtype,
                                     const std::vector<int64_t>& shape,
                                     std::span<const uint8_t> bytes) {
  insert(name, dtype, shape, bytes.size()).borrowed = bytes;
}

void SafetensorsWriter::add_f32(const std::string& name, const std::vector<int64_t>& shape,
                                std::span<const float> values) {
  add(name, Dtype::kF32, shape, byte_span(values));
}

void SafetensorsWriter::add_f64(const std::string& name, const std::vector<int64_t>& shape,
                                std::span<const double> values) {
  add(name, Dtype::kF64, shape, byte_span(values));
}

void SafetensorsWriter::add_i32(const std::string& name, const std::vector<int64_t>& shape,
                                std::span<const int32_t> values) {
  add(name, Dtype::kI32, shape, byte_span(values));
}

void SafetensorsWriter::add_i64(const std::string& name, const std::vector<int64_t>& shape,
                                std::span<const int64_t> values) {
  add(name, Dtype::kI64, shape, byte_span(values));
}

std::string SafetensorsWriter::header() const {
  // Written by hand rather than via json::dump() so keys come out in the reference writer's
  // order (metadata first, then tensors by offset, fields dtype/shape/data_offsets) and a
  // file of one dtype is byte-identical to what the Python package writes.
  std::string h = "{";
  bool first = true;
  if (!metadata_.empty()) {
    h += "\"__metadata__\":";
    h += json(metadata_).dump();
    first = false;
  }
  uint64_t offset = 0;
  for (const auto& [name, e] : tensors_) {
    if (!first) h += ',';
    first = false;
    h += json(name).dump();
    h += ":{\"dtype\":\"";
    h += dtype_name(e.dtype);
    h += "\",\"shape\":[";
    for (size_t i = 0; i < e.shape.size(); ++i) {
      if (i > 0) h += ',';
      h += std::to_string(e.shape[i]);
    }
    h += "],\"data_offsets\":[";
    h += std::to_string(offset);
    h += ',';
    offset += e.bytes().size();
    h += std::to_string(offset);
    h += "]}";
  }
  h += '}';
  // Padding keeps the data buffer 8-byte aligned in the file.
  h.append((8 - h.size() % 8) % 8, ' ');
  return h;
}

std::string SafetensorsWriter::serialize() const {
  std::string h = header();
  uint64_t n = h.size();
  std::string out(reinterpret_cast<const char*>(&n), sizeof n);
  out += h;
  for (const auto& [name, e] : tensors_) {
    out.append(reinterpret_cast<const char*>(e.bytes().data()), e.bytes().size());
  }
  return out;
}

void SafetensorsWriter::write(const std::string& path) const {
  std::string h = header();
  uint64_t n = h.size();
  AtomicFileWriter w(path);
  w.write(&n, sizeof n);
  w.write(h.data(), h.size());
  for (const auto& [name, e] : tensors_) {
    if (!e.bytes().empty()) w.write(e.bytes().data(), e.bytes().size());
  }
  w.commit();
}

// ---------------------------------------------------------------------------------------------
// Reader

namespace {

// nlohmann::json keeps the last of duplicate keys silently; a duplicated tensor name would then
// hide one tensor's data, so the parse callback records the first duplicate key at any depth.
struct DuplicateKeyFinder {
  std::vector<std::set<std::string>> open_objects;
  std::optional<std::string> duplicate;
  bool duplicate_is_top_level = false;

  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case json::parse_event_t::key:
        if (!open_objects.empty() && parsed.is_string()) {
          const auto& key = parsed.get_ref<const std::string&>();
          if (!open_objects.back().insert(key).second && !duplicate) {
            duplicate = key;
            duplicate_is_top_level = open_objects.size() == 1;
          }
        }
        break;
      default:
        break;
    }
    return true;
  }
};

// Reads a JSON value that must be a non-negative integer fitting in int64.
bool as_dimension(const json& j, int64_t* out) {
  if (!j.is_number_unsigned()) return false;
  uint64_t v = j.get<uint64_t>();
  if (v > static_cast<uint64_t>(INT64_MAX)) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path) : file_(path) {
  const uint64_t file_size = file_.size();
  if (file_size < 8) {
    fail_file(path, "file is " + std::to_string(file_size) +
                        " bytes, shorter than the 8-byte header length field");
  }
  const uint64_t header_len = read_u64_le(file_.data());
  if (header_len > kMaxHeaderBytes) {
    fail_file(path, "header length field says " + std::to_string(header_len) +
                        " bytes, more than the " + std::to_string(kMaxHeaderBytes) + "-byte limit");
  }
  if (header_len > file_size - 8) {
    fail_file(path, "header length field says " + std::to_string(header_len) + " bytes but only " +
                        std::to_string(file_size - 8) + " bytes follow it");
  }
  const uint64_t data_size = file_size - 8 - header_len;
  data_ = file_.data() + 8 + header_len;

  std::string_view text(reinterpret_cast<const char*>(file_.data() + 8), header_len);
  DuplicateKeyFinder finder;
  json header;
  try {
    header = json::parse(text, std::ref(finder));
  } catch (const json::exception& e) {
    fail_file(path, std::string("header is not valid JSON (") + e.what() + ")");
  }
  if (finder.duplicate) {
    if (finder.duplicate_is_top_level) {
      fail_tensor(path, *finder.duplicate, "name appears more than once in the header");
    }
    fail_file(path, "header repeats the key " + in_quotes(*finder.duplicate) + " inside an object");
  }
  if (!header.is_object()) {
    fail_file(path, "header is a JSON " + json_type(header) + ", not an object");
  }

  struct Span {
    uint64_t begin;
    uint64_t end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) {
        fail_file(path, "'__metadata__' is a JSON " + json_type(value) + ", not an object");
      }
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) {
          fail_file(path,
                    "metadata value for key " + in_quotes(key) + " is a JSON " + json_type(v) +
                        ", not a string",
                    "safetensors metadata maps strings to strings; store numbers and lists as "
                    "their JSON text");
        }
        metadata_[key] = v.get<std::string>();
      }
      continue;
    }
    if (!value.is_object()) {
      fail_tensor(path, name, "entry is a JSON " + json_type(value) + ", not an object");
    }
    for (const auto& [field, unused] : value.items()) {
      if (field != "dtype" && field != "shape" && field != "data_offsets") {
        fail_tensor(path, name,
                    "unexpected field " + in_quotes(field) +
                        " (expected only 'dtype', 'shape' and 'data_offsets')");
      }
    }
    Entry entry{};
    auto dtype_it = value.find("dtype");
    if (dtype_it == value.end() || !dtype_it->is_string()) {
      fail_tensor(path, name, "missing or non-string 'dtype'");
    }
    const auto& dtype_text = dtype_it->get_ref<const std::string&>();
    auto dtype = dtype_from_name(dtype_text);
    if (!dtype) {
      fail_tensor(path, name, "unknown dtype " + in_quotes(dtype_text),
                  "supported dtypes are BOOL, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, "
                  "BF16, I32, U32, F32, F64, I64, U64, C64; convert the tensor to one of them");
    }
    entry.dtype = *dtype;

    auto shape_it = value.find("shape");
    if (shape_it == value.end() || !shape_it->is_array()) {
      fail_tensor(path, name, "missing 'shape' or it is not a JSON array");
    }
    for (const auto& d : *shape_it) {
      int64_t dim = 0;
      if (!as_dimension(d, &dim)) {
        fail_tensor(path, name, "shape entry " + d.dump() + " is not a non-negative integer");
      }
      entry.shape.push_back(dim);
    }

    auto offsets_it = value.find("data_offsets");
    int64_t begin = 0;
    int64_t end = 0;
    if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
        !as_dimension((*offsets_it)[0], &begin) || !as_dimension((*offsets_it)[1], &end)) {
      fail_tensor(path, name, "'data_offsets' must be an array of two non-negative integers");
    }
    entry.begin = static_cast<uint64_t>(begin);
    entry.end = static_cast<uint64_t>(end);
    if (entry.end < entry.begin) {
      fail_tensor(path, name,
                  "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                      "] end before they begin");
    }
    if (entry.end > data_size) {
      fail_tensor(path, name,
                  "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                      "] run past the " + std::to_string(data_size) + "-byte data buffer");
    }
    uint64_t expected = 0;
    if (!checked_byte_count(entry.shape, dtype_size(entry.dtype), &expected)) {
      fail_tensor(path, name, "shape " + shape_string(entry.shape) + " overflows a 64-bit size");
    }
    if (expected != entry.end - entry.begin) {
      fail_tensor(path, name,
                  "shape " + shape_string(entry.shape) + " of " + dtype_text + " needs " +
                      std::to_string(expected) + " bytes but data_offsets [" +
                      std::to_string(begin) + ", " + std::to_string(end) + "] span " +
                      std::to_string(entry.end - entry.begin));
    }
    auto [it, inserted] = tensors_.emplace(name, std::move(entry));
    spans.push_back({it->second.begin, it->second.end, &it->first});
  }

  // The reference reader requires the tensors to tile the data buffer exactly: no gaps, no
  // overlaps, nothing left over. Anything else means the header and data disagree.
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t covered = 0;
  const std::string* previous = nullptr;
  for (const Span& s : spans) {
    if (s.begin < covered) {
      fail_tensor(path, *s.name,
                  "data_offsets [" + std::to_string(s.begin) + ", " + std::to_string(s.end) +
                      "] overlap tensor " + in_quotes(*previous) + " which ends at " +
                      std::to_string(covered));
    }
    if (s.begin > covered) {
      fail_file(path, "bytes [" + std::to_string(covered) + ", " + std::to_string(s.begin) +
                          ") of the data buffer belong to no tensor (gap before tensor " +
                          in_quotes(*s.name) + ")");
    }
    covered = s.end;
    previous = s.name;
  }
  if (covered != data_size) {
    fail_file(path, "the tensors cover " + std::to_string(covered) + " of the " +
                        std::to_string(data_size) + " data bytes; the last " +
                        std::to_string(data_size - covered) + " belong to no tensor");
  }
}

std::vector<std::string> SafetensorsReader::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& [name, e] : tensors_) out.push_back(name);
  return out;
}

bool SafetensorsReader::contains(std::string_view name) const {
  return tensors_.find(name) != tensors_.end();
}

const std::string& SafetensorsReader::metadata_value(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) {
    fail_file(path(), "no metadata key " + in_quotes(key),
              "the file was written by a different tool or version; re-export it");
  }
  return it->second;
}

const SafetensorsReader::Tensors::value_type& SafetensorsReader::find(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::string what =
        "no such tensor (the file has " + std::to_string(tensors_.size()) + " tensors";
    if (!tensors_.empty()) what += ", e.g. " + in_quotes(tensors_.begin()->first);
    fail_tensor(path(), name, what + ")",
                "check the tensor name, or that the file comes from the matching model");
  }
  return *it;
}

TensorView SafetensorsReader::tensor(std::string_view name) const {
  const auto& [key, e] = find(name);
  return TensorView{key, e.dtype, e.shape,
                    std::span<const uint8_t>(data_ + e.begin, e.end - e.begin)};
}

void SafetensorsReader::check_shape(std::string_view name, const Entry& entry,
                                    const std::vector<int64_t>* expected_shape) const {
  if (expected_shape != nullptr && *expected_shape != entry.shape) {
    fail_tensor(path(), name,
                "shape is " + shape_string(entry.shape) + " but " + shape_string(*expected_shape) +
                    " was expected",
                "check that the model configuration matches the one the file was written with");
  }
}

template <typename T>
std::vector<T> SafetensorsReader::read_as(std::string_view name,
                                          const std::vector<int64_t>* expected_shape,
                                          FloatConversion conversion) const {
  const Entry& e = find(name).second;
  check_shape(name, e, expected_shape);
  const uint8_t* src = data_ + e.begin;
  const size_t n = static_cast<size_t>(shape_numel(e.shape));
  std::vector<T> out(n);

  Dtype want;
  if constexpr (std::is_same_v<T, float>) {
    want = Dtype::kF32;
  } else if constexpr (std::is_same_v<T, double>) {
    want = Dtype::kF64;
  } else if constexpr (std::is_same_v<T, int32_t>) {
    want = Dtype::kI32;
  } else {
    static_assert(std::is_same_v<T, int64_t>);
    want = Dtype::kI64;
  }
  if (e.dtype == want) {
    if (n > 0) std::memcpy(out.data(), src, n * sizeof(T));
    return out;
  }
  if constexpr (std::is_floating_point_v<T>) {
    using Other = std::conditional_t<std::is_same_v<T, float>, double, float>;
    const Dtype other = std::is_same_v<T, float> ? Dtype::kF64 : Dtype::kF32;
    if (e.dtype == other && conversion == FloatConversion::kAllow) {
      for (size_t i = 0; i < n; ++i) {
        Other v;
        std::memcpy(&v, src + i * sizeof(Other), sizeof v);
        out[i] = static_cast<T>(v);
      }
      return out;
    }
    if (e.dtype == other) {
      fail_tensor(path(), name,
                  "dtype is " + std::string(dtype_name(e.dtype)) + " but " +
                      std::string(dtype_name(want)) + " was requested",
                  "pass FloatConversion::kAllow to convert it, or re-export the tensor as " +
                      std::string(dtype_name(want)));
    }
  }
  fail_tensor(path(), name,
              "dtype is " + std::string(dtype_name(e.dtype)) + " but " +
                  std::string(dtype_name(want)) + " was requested",
              "re-export the tensor as " + std::string(dtype_name(want)));
}

std::vector<float> SafetensorsReader::read_f32(std::string_view name,
                                               FloatConversion conversion) const {
  return read_as<float>(name, nullptr, conversion);
}
std::vector<float> SafetensorsReader::read_f32(std::string_view name,
                                               const std::vector<int64_t>& expected_shape,
                                               FloatConversion conversion) const {
  return read_as<float>(name, &expected_shape, conversion);
}
std::vector<double> SafetensorsReader::read_f64(std::string_view name,
                                                FloatConversion conversion) const {
  return read_as<double>(name, nullptr, conversion);
}
std::vector<double> SafetensorsReader::read_f64(std::string_view name,
                                                const std::vector<int64_t>& expected_shape,
                                                FloatConversion conversion) const {
  return read_as<double>(name, &expected_shape, conversion);
}
std::vector<int32_t> SafetensorsReader::read_i32(std::string_view name) const {
  return read_as<int32_t>(name, nullptr, FloatConversion::kExact);
}
std::vector<int32_t> SafetensorsReader::read_i32(std::string_view name,
                                                 const std::vector<int64_t>& expected_shape) const {
  return read_as<int32_t>(name, &expected_shape, FloatConversion::kExact);
}
std::vector<int64_t> SafetensorsReader::read_i64(std::string_view name) const {
  return read_as<int64_t>(name, nullptr, FloatConversion::kExact);
}
std::vector<int64_t> SafetensorsReader::read_i64(std::string_view name,
                                                 const std::vector<int64_t>& expected_shape) const {
  return read_as<int64_t>(name, &expected_shape, FloatConversion::kExact);
}

}  // namespace nanogpt
