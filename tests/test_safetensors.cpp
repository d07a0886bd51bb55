#include "runtime/safetensors.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/file_io.hpp"
#include "support/fixtures.hpp"

namespace nanogpt {
namespace {

std::string le_u64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

template <typename T>
std::string raw_bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

template <typename T>
std::span<const uint8_t> as_u8(const std::vector<T>& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(T)};
}

// A file with the given header text (unpadded) followed by `data`.
std::string make_file(const std::string& header, const std::string& data) {
  return le_u64(header.size()) + header + data;
}

std::string error_of(const std::string& path) {
  try {
    SafetensorsReader reader(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripSeveralDtypesWithMetadata) {
  TempDir dir;
  const std::string path = dir.path() + "/model.safetensors";
  const std::vector<float> f32 = {1.5f, -2.25f, 3.0f, 0.0f, -0.0f, 1e-30f};
  const std::vector<double> f64 = {0.1, -1e300, 3.141592653589793};
  const std::vector<int32_t> i32 = {1, -2, 2147483647, -2147483647 - 1};
  const std::vector<int64_t> i64 = {int64_t{1} << 40, -7};
  const std::vector<uint16_t> u16 = {0, 65535, 258};
  const std::vector<uint16_t> bf16 = {0x3f80, 0xc000};  // 1.0, -2.0
  const std::vector<uint8_t> u8 = {0, 127, 255};
  const std::vector<float> scalar = {42.0f};

  SafetensorsWriter w;
  w.set_metadata("step", "1750");
  w.set_metadata("config", R"({"n_layer": 12, "name": "gpt\"2"})");
  w.set_metadata("unicode", "Grüße ✓");
  w.add_f32("wte.weight", {2, 3}, f32);
  w.add_f64("ln.bias", {3}, f64);
  w.add_i32("tokens", {2, 2}, i32);
  w.add_i64("a.counts", {2}, i64);
  w.add("u16", Dtype::kU16, {3}, as_u8(u16));
  w.add("bf16", Dtype::kBF16, {1, 2}, as_u8(bf16));
  w.add("bytes", Dtype::kU8, {3}, as_u8(u8));
  w.add_f32("scalar", {}, scalar);
  w.add_f32("empty", {0, 4}, std::span<const float>());
  w.write(path);

  SafetensorsReader r(path);
  EXPECT_EQ(r.path(), path);
  EXPECT_EQ(r.names(), (std::vector<std::string>{"a.counts", "bf16", "bytes", "empty", "ln.bias",
                                                 "scalar", "tokens", "u16", "wte.weight"}));
  EXPECT_EQ(r.metadata().size(), 3u);
  EXPECT_EQ(r.metadata_value("step"), "1750");
  EXPECT_EQ(r.metadata_value("config"), R"({"n_layer": 12, "name": "gpt\"2"})");
  EXPECT_EQ(r.metadata_value("unicode"), "Grüße ✓");

  EXPECT_EQ(r.read_f32("wte.weight", {2, 3}), f32);
  EXPECT_TRUE(std::signbit(r.read_f32("wte.weight")[4]));
  EXPECT_EQ(r.read_f64("ln.bias", {3}), f64);
  EXPECT_EQ(r.read_i32("tokens", {2, 2}), i32);
  EXPECT_EQ(r.read_i64("a.counts"), i64);
  EXPECT_EQ(r.read_f32("scalar", {}), scalar);
  EXPECT_TRUE(r.read_f32("empty", {0, 4}).empty());

  TensorView u16_view = r.tensor("u16");
  EXPECT_EQ(u16_view.name, "u16");
  EXPECT_EQ(u16_view.dtype, Dtype::kU16);
  EXPECT_EQ(u16_view.shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(u16_view.numel(), 3u);
  ASSERT_EQ(u16_view.bytes.size(), 6u);
  EXPECT_EQ(std::memcmp(u16_view.bytes.data(), u16.data(), 6), 0);

  TensorView bf16_view = r.tensor("bf16");
  EXPECT_EQ(bf16_view.dtype, Dtype::kBF16);
  EXPECT_EQ(bf16_view.shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(std::memcmp(bf16_view.bytes.data(), bf16.data(), 4), 0);

  TensorView u8_view = r.tensor("bytes");
  EXPECT_EQ(std::vector<uint8_t>(u8_view.bytes.begin(), u8_view.bytes.end()), u8);

  TensorView scalar_view = r.tensor("scalar");
  EXPECT_TRUE(scalar_view.shape.empty());
  EXPECT_EQ(scalar_view.numel(), 1u);

  // The header is padded so the data buffer starts 8-byte aligned.
  std::string contents = read_file(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, contents.data(), 8);
  EXPECT_EQ(header_len % 8, 0u);
  EXPECT_EQ(contents, w.serialize());
}

TEST(Safetensors, ViewsPointIntoTheMapping) {
  TempDir dir;
  const std::string path = dir.path() + "/v.safetensors";
  const std::vector<float> values = {1, 2, 3, 4};
  SafetensorsWriter w;
  w.add_f32("x", {4}, values);
  w.write(path);
  SafetensorsReader r(path);
  TensorView a = r.tensor("x");
  TensorView b = r.tensor("x");
  EXPECT_EQ(a.bytes.data(), b.bytes.data());  // no copy per lookup
  float third = 0;
  std::memcpy(&third, a.bytes.data() + 8, 4);
  EXPECT_EQ(third, 3.0f);
}

TEST(Safetensors, SerializesLikeTheReferenceWriter) {
  // Expected bytes follow the format spec: compact JSON, fields in dtype/shape/data_offsets
  // order, metadata first, spaces up to a multiple of 8.
  SafetensorsWriter one;
  const std::vector<float> values = {0, 1, 2, 3, 4, 5};
  one.add_f32("attn.0", {1, 2, 3}, values);
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);
  EXPECT_EQ(one.serialize(), le_u64(64) + header + raw_bytes(values));

  SafetensorsWriter empty;
  EXPECT_EQ(empty.serialize(), le_u64(8) + "{}      ");

  SafetensorsWriter meta;
  meta.set_metadata("framework", "pt");
  EXPECT_EQ(meta.serialize(), le_u64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");

  // Tensors are laid out in sorted-name order whatever order they were added in.
  SafetensorsWriter two;
  const std::vector<int32_t> b = {7};
  const std::vector<int32_t> a = {8, 9};
  two.add_i32("b", {1}, b);
  two.add_i32("a", {2}, a);
  const std::string two_header = R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
                                 R"("b":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})";
  std::string padded = two_header + std::string((8 - two_header.size() % 8) % 8, ' ');
  EXPECT_EQ(two.serialize(), le_u64(padded.size()) + padded + raw_bytes(a) + raw_bytes(b));
}

TEST(Safetensors, ReadsHandWrittenFile) {
  TempDir dir;
  const std::string path = dir.path() + "/hand.safetensors";
  // Keys in unusual order, whitespace, data not in name order, no padding.
  const std::string header =
      "{ \"z.first\" : {\"data_offsets\": [0, 8], \"shape\": [2], \"dtype\": \"F32\"},\n"
      "  \"__metadata__\": {\"format\": \"pt\", \"note\": \"\\u00e9\"},\n"
      "  \"a.second\": {\"shape\": [1, 1], \"dtype\": \"F64\", \"data_offsets\": [8, 16]},\n"
      "  \"m.third\": {\"dtype\": \"I32\", \"shape\": [3], \"data_offsets\": [16, 28]} }";
  std::string data;
  // 1.0f, -0.5f little-endian
  data += std::string("\x00\x00\x80\x3f", 4);
  data += std::string("\x00\x00\x00\xbf", 4);
  // 2.5 as double: 0x4004000000000000
  data += std::string("\x00\x00\x00\x00\x00\x00\x04\x40", 8);
  // 1, -1, 256
  data += std::string("\x01\x00\x00\x00", 4);
  data += std::string("\xff\xff\xff\xff", 4);
  data += std::string("\x00\x01\x00\x00", 4);
  write_file_atomic(path, make_file(header, data));

  SafetensorsReader r(path);
  EXPECT_EQ(r.names(), (std::vector<std::string>{"a.second", "m.third", "z.first"}));
  EXPECT_EQ(r.metadata_value("format"), "pt");
  EXPECT_EQ(r.metadata_value("note"), "\xc3\xa9");
  EXPECT_EQ(r.read_f32("z.first", {2}), (std::vector<float>{1.0f, -0.5f}));
  EXPECT_EQ(r.read_f64("a.second", {1, 1}), (std::vector<double>{2.5}));
  EXPECT_EQ(r.read_i32("m.third", {3}), (std::vector<int32_t>{1, -1, 256}));
  // The header is not padded, so the F64 data is unaligned in the mapping; the accessors must
  // not assume alignment.
  EXPECT_EQ(r.tensor("a.second").bytes.size(), 8u);
}

TEST(Safetensors, HeaderWithoutTensorsAndTrailingSpaces) {
  TempDir dir;
  const std::string path = dir.path() + "/empty.safetensors";
  write_file_atomic(path, make_file("{}      ", ""));
  SafetensorsReader r(path);
  EXPECT_EQ(r.size(), 0u);
  EXPECT_TRUE(r.metadata().empty());
}

TEST(Safetensors, FloatConversionOnlyWhenAsked) {
  TempDir dir;
  const std::string path = dir.path() + "/conv.safetensors";
  const std::vector<double> d = {0.1, 2.0};
  const std::vector<float> f = {0.1f, -3.0f};
  SafetensorsWriter w;
  w.add_f64("d", {2}, d);
  w.add_f32("f", {2}, f);
  w.write(path);
  SafetensorsReader r(path);

  EXPECT_THROW(r.read_f32("d"), InputError);
  EXPECT_EQ(r.read_f32("d", FloatConversion::kAllow), (std::vector<float>{0.1f, 2.0f}));
  EXPECT_EQ(r.read_f32("d", {2}, FloatConversion::kAllow), (std::vector<float>{0.1f, 2.0f}));
  EXPECT_THROW(r.read_f64("f"), InputError);
  EXPECT_EQ(r.read_f64("f", FloatConversion::kAllow),
            (std::vector<double>{static_cast<double>(0.1f), -3.0}));
  // Integers never convert.
  EXPECT_THROW(r.read_i32("f"), InputError);
  EXPECT_THROW(r.read_i64("d"), InputError);

  try {
    r.read_f32("d");
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("'d'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("F64"), std::string::npos) << msg;
    EXPECT_NE(msg.find("FloatConversion::kAllow"), std::string::npos) << msg;
  }
}

TEST(Safetensors, ShapeMismatchNamesBothShapes) {
  TempDir dir;
  const std::string path = dir.path() + "/shape.safetensors";
  const std::vector<float> f(6, 1.0f);
  SafetensorsWriter w;
  w.add_f32("w", {2, 3}, f);
  w.write(path);
  SafetensorsReader r(path);
  try {
    r.read_f32("w", {3, 2});
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3, 2]"), std::string::npos) << msg;
  }
}

TEST(Safetensors, MissingTensorAndMetadataKeyNameTheFile) {
  TempDir dir;
  const std::string path = dir.path() + "/missing.safetensors";
  const std::vector<float> f = {1.0f};
  SafetensorsWriter w;
  w.add_f32("present", {1}, f);
  w.write(path);
  SafetensorsReader r(path);
  EXPECT_TRUE(r.contains("present"));
  EXPECT_FALSE(r.contains("absent"));
  for (auto lookup : {+[](const SafetensorsReader& rd) { rd.tensor("absent"); },
                      +[](const SafetensorsReader& rd) { rd.read_f32("absent"); },
                      +[](const SafetensorsReader& rd) { rd.read_i64("absent", {1}); }}) {
    try {
      lookup(r);
      FAIL() << "expected an error";
    } catch (const InputError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find("'absent'"), std::string::npos) << msg;
    }
  }
  try {
    r.metadata_value("nope");
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
  }
}

struct MalformedCase {
  const char* label;
  std::string contents;
  const char* expected;  // substring of the message besides the path
};

std::vector<MalformedCase> malformed_cases() {
  const std::string f32x2(8, '\0');
  auto tensor = [](const std::string& name, const std::string& dtype, const std::string& shape,
                   const std::string& offsets) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":" + offsets + "}";
  };
  return {
      {"empty file", "", "shorter than the 8-byte"},
      {"five bytes", "\x05\x00\x00\x00\x00", "shorter than the 8-byte"},
      {"header length beyond file", le_u64(100) + "{}", "only 2 bytes follow"},
      {"header length absurd", le_u64(~uint64_t{0}) + "{}", "limit"},
      {"invalid JSON", make_file("{\"a\":", ""), "not valid JSON"},
      {"trailing garbage after JSON", make_file("{}xx", ""), "not valid JSON"},
      {"invalid UTF-8 in header", make_file("{\"\xff\":{}}", ""), "not valid JSON"},
      {"header not an object", make_file("[1,2]", ""), "not an object"},
      {"tensor entry not an object", make_file("{\"t\":3}", ""), "'t'"},
      {"unknown dtype", make_file("{" + tensor("t", "F128", "[1]", "[0,8]") + "}", f32x2),
       "unknown dtype 'F128'"},
      {"sub-byte dtype", make_file("{" + tensor("t", "F4", "[2]", "[0,1]") + "}", "x"),
       "unknown dtype 'F4'"},
      {"missing dtype", make_file(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", f32x2), "'dtype'"},
      {"negative dimension", make_file("{" + tensor("t", "F32", "[-2]", "[0,8]") + "}", f32x2),
       "not a non-negative integer"},
      {"fractional dimension", make_file("{" + tensor("t", "F32", "[2.0]", "[0,8]") + "}", f32x2),
       "not a non-negative integer"},
      {"shape not an array", make_file("{" + tensor("t", "F32", "2", "[0,8]") + "}", f32x2),
       "'shape'"},
      {"offsets wrong arity", make_file("{" + tensor("t", "F32", "[2]", "[0,8,8]") + "}", f32x2),
       "two non-negative integers"},
      {"unexpected field",
       make_file(R"({"t":{"dtype":"F32","shape":[2],"data_offset":[0,8]}})", f32x2),
       "unexpected field 'data_offset'"},
      {"byte count mismatch", make_file("{" + tensor("t", "F32", "[3]", "[0,8]") + "}", f32x2),
       "needs 12 bytes"},
      {"byte count overflow",
       make_file("{" + tensor("t", "F32", "[4294967296,4294967296]", "[0,8]") + "}", f32x2),
       "overflows"},
      {"offsets out of range", make_file("{" + tensor("t", "F32", "[4]", "[0,16]") + "}", f32x2),
       "run past the 8-byte data buffer"},
      {"offsets reversed", make_file("{" + tensor("t", "F32", "[0]", "[8,0]") + "}", f32x2),
       "end before they begin"},
      {"overlapping tensors",
       make_file("{" + tensor("a", "F32", "[2]", "[0,8]") + "," +
                     tensor("b", "F32", "[1]", "[4,8]") + "}",
                 f32x2),
       "overlap tensor 'a'"},
      {"gap between tensors",
       make_file("{" + tensor("a", "F32", "[1]", "[0,4]") + "," +
                     tensor("b", "F32", "[1]", "[8,12]") + "}",
                 std::string(12, '\0')),
       "belong to no tensor"},
      {"gap at start", make_file("{" + tensor("a", "F32", "[1]", "[4,8]") + "}", f32x2),
       "belong to no tensor"},
      {"trailing data not covered",
       make_file("{" + tensor("a", "F32", "[1]", "[0,4]") + "}", f32x2), "belong to no tensor"},
      {"data but no tensors", make_file("{}", f32x2), "belong to no tensor"},
      {"non-string metadata value", make_file(R"({"__metadata__":{"step":1750}})", ""),
       "metadata value for key 'step'"},
      {"nested metadata value", make_file(R"({"__metadata__":{"cfg":{"a":"b"}}})", ""),
       "metadata value for key 'cfg'"},
      {"metadata not an object", make_file(R"({"__metadata__":"x"})", ""), "'__metadata__'"},
      {"duplicate tensor name",
       make_file("{" + tensor("t", "F32", "[1]", "[0,4]") + "," +
                     tensor("t", "F32", "[1]", "[4,8]") + "}",
                 f32x2),
       "more than once"},
      {"duplicate metadata key", make_file(R"({"__metadata__":{"k":"a","k":"b"}})", ""),
       "repeats the key 'k'"},
  };
}

TEST(Safetensors, MalformedFilesRaiseInputErrorNamingTheFile) {
  TempDir dir;
  int index = 0;
  for (const MalformedCase& c : malformed_cases()) {
    const std::string path = dir.path() + "/bad" + std::to_string(index++) + ".safetensors";
    write_file_atomic(path, c.contents);
    const std::string msg = error_of(path);
    ASSERT_FALSE(msg.empty()) << c.label << ": no InputError";
    EXPECT_NE(msg.find(path), std::string::npos) << c.label << ": " << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.label << ": " << msg;
  }
}

TEST(Safetensors, MessagesNameTheOffendingTensor) {
  TempDir dir;
  const std::string path = dir.path() + "/name.safetensors";
  write_file_atomic(
      path,
      make_file(R"({"h.3.attn.c_proj.weight":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                std::string(8, '\0')));
  const std::string msg = error_of(path);
  EXPECT_NE(msg.find("'h.3.attn.c_proj.weight'"), std::string::npos) << msg;
}

TEST(Safetensors, WriterRejectsBadTensors) {
  SafetensorsWriter w;
  const std::vector<float> three = {1, 2, 3};
  EXPECT_THROW(w.add_f32("t", {2, 2}, three), InputError);
  EXPECT_THROW(w.add_f32("t", {-3}, three), InputError);
  EXPECT_THROW(w.add_f32("__metadata__", {3}, three), InputError);
  EXPECT_THROW(w.add_f32(std::string("bad\xff", 4), {3}, three), InputError);
  w.add_f32("t", {3}, three);
  EXPECT_THROW(w.add_f32("t", {3}, three), InputError);
  EXPECT_EQ(w.size(), 1u);
}

TEST(Safetensors, BorrowedTensorsAndWriterCopies) {
  TempDir dir;
  const std::string path = dir.path() + "/borrowed.safetensors";
  std::vector<float> big(1000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f;
  SafetensorsWriter original;
  original.add_borrowed("big", Dtype::kF32, {10, 100}, as_u8(big));
  {
    std::vector<float> small = {9.0f};
    original.add_f32("small", {1}, small);
  }  // the owned copy must outlive `small`
  SafetensorsWriter copy = original;
  original = SafetensorsWriter();
  copy.write(path);
  SafetensorsReader r(path);
  EXPECT_EQ(r.read_f32("big", {10, 100}), big);
  EXPECT_EQ(r.read_f32("small", {1}), (std::vector<float>{9.0f}));
}

TEST(Safetensors, RewriteIsAtomicAndLeavesNoTemporary) {
  TempDir dir;
  const std::string path = dir.path() + "/ckpt.safetensors";
  for (int step = 0; step < 3; ++step) {
    SafetensorsWriter w;
    w.set_metadata("step", std::to_string(step));
    const std::vector<int64_t> v = {step};
    w.add_i64("step", {1}, v);
    w.write(path);
  }
  SafetensorsReader r(path);
  EXPECT_EQ(r.metadata_value("step"), "2");
  int entries = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(Safetensors, DtypeNamesRoundTrip) {
  for (Dtype d : {Dtype::kBool, Dtype::kU8, Dtype::kI8, Dtype::kF8E5M2, Dtype::kF8E4M3,
                  Dtype::kF8E8M0, Dtype::kI16, Dtype::kU16, Dtype::kF16, Dtype::kBF16, Dtype::kI32,
                  Dtype::kU32, Dtype::kF32, Dtype::kF64, Dtype::kI64, Dtype::kU64, Dtype::kC64}) {
    auto back = dtype_from_name(dtype_name(d));
    ASSERT_TRUE(back.has_value()) << dtype_name(d);
    EXPECT_EQ(*back, d);
  }
  EXPECT_EQ(dtype_size(Dtype::kBF16), 2u);
  EXPECT_EQ(dtype_size(Dtype::kF8E4M3), 1u);
  EXPECT_EQ(dtype_size(Dtype::kF64), 8u);
  EXPECT_FALSE(dtype_from_name("f32").has_value());
}

}  // namespace
}  // namespace nanogpt
