// The GGUF reader: every metadata value type, alignment, versions, and hostile files (truncated,
// huge counts, bad offsets, overlapping or out-of-file tensors, unknown types, random corruption),
// each of which must give a ModelError that names the file, never a crash or a hang.
#include "core/model/gguf_reader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "core/model/model.h"
#include "core/util/error.h"
#include "gguf_writer.h"
#include "gguf_test_util.h"

namespace kvevict {
namespace {

using test::GgufWriter;

template <typename T>
std::vector<uint8_t> le(T v) {
  std::vector<uint8_t> b(sizeof(T));
  std::memcpy(b.data(), &v, sizeof(T));
  return b;
}
std::vector<uint8_t> cat(std::initializer_list<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Writes `bytes` to a temp file, parses it, and returns the ModelError message ("" if it parsed).
std::string parse_error(const std::vector<uint8_t>& bytes, const std::string& label, bool full_load = false) {
  const std::string path = test::temp_file_path(label + ".gguf");
  GgufWriter::write_bytes(path, bytes);
  std::string msg;
  try {
    if (full_load) load_gguf(path);
    else GgufFile f(path);
  } catch (const ModelError& e) {
    msg = e.what();
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << "message does not name the file: " << msg;
  }
  std::filesystem::remove(path);
  return msg;
}

void expect_error(const std::vector<uint8_t>& bytes, const std::string& label, const std::string& needle) {
  const std::string msg = parse_error(bytes, label);
  EXPECT_FALSE(msg.empty()) << label << ": hostile file accepted";
  EXPECT_NE(msg.find(needle), std::string::npos) << label << ": " << msg;
}

// A small valid file: a few metadata entries and two tensors.
GgufWriter small_file() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("answer", 42);
  w.add_string_array("words", {"a", "bc", ""});
  w.add_f32_tensor("a", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  w.add_f32_tensor("b", {3}, {9, 10, 11});
  return w;
}

TEST(GgufReader, EveryValueTypeAndNestedArrays) {
  GgufWriter w;
  w.version = 2;
  w.add_raw("u8", GgufWriter::U8, le<uint8_t>(200));
  w.add_raw("i8", GgufWriter::I8, le<int8_t>(-100));
  w.add_raw("u16", GgufWriter::U16, le<uint16_t>(60000));
  w.add_raw("i16", GgufWriter::I16, le<int16_t>(-30000));
  w.add_u32("u32", 4000000000u);
  w.add_i32("i32", -2000000000);
  w.add_f32("f32", 0.5f);
  w.add_bool("bool", true);
  w.add_string("string", "héllo");
  w.add_u64("u64", uint64_t{1} << 40);
  w.add_raw("i64", GgufWriter::I64, le<int64_t>(-(int64_t{1} << 50)));
  w.add_f64("f64", -2.25);
  w.add_array("floats", GgufWriter::F32, std::vector<float>{1.5f, -2.0f});
  w.add_array("bools", GgufWriter::BOOL, std::vector<uint8_t>{1, 0, 1});
  w.add_string_array("strings", {"x", "", "yz"});
  // [[1, 2], [3]] as an array of arrays of i32.
  w.add_raw("nested", GgufWriter::ARRAY,
            cat({le<uint32_t>(GgufWriter::ARRAY), le<uint64_t>(2), le<uint32_t>(GgufWriter::I32), le<uint64_t>(2),
                 le<int32_t>(1), le<int32_t>(2), le<uint32_t>(GgufWriter::I32), le<uint64_t>(1), le<int32_t>(3)}));
  const std::string path = test::temp_file_path("types.gguf");
  w.write(path);
  GgufFile f(path);
  std::filesystem::remove(path);
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.get_int("u8"), 200);
  EXPECT_EQ(f.get_int("i8"), -100);
  EXPECT_EQ(f.get_int("u16"), 60000);
  EXPECT_EQ(f.get_int("i16"), -30000);
  EXPECT_EQ(f.get_int("u32"), 4000000000LL);
  EXPECT_EQ(f.get_int("i32"), -2000000000);
  EXPECT_EQ(f.get_float("f32"), 0.5);
  EXPECT_EQ(f.opt_bool("bool"), true);
  EXPECT_EQ(f.get_string("string"), "héllo");
  EXPECT_EQ(f.get_int("u64"), int64_t{1} << 40);
  EXPECT_EQ(f.get_int("i64"), -(int64_t{1} << 50));
  EXPECT_EQ(f.get_float("f64"), -2.25);
  EXPECT_EQ(f.get_float("u32"), 4e9);  // integers read as floats where a float is expected
  const GgufValue& floats = f.get_array("floats", GgufValueType::F32);
  ASSERT_EQ(floats.count, 2u);
  EXPECT_EQ(floats.float_at(0), 1.5);
  EXPECT_EQ(floats.float_at(1), -2.0);
  const GgufValue& bools = f.get_array("bools", GgufValueType::BOOL);
  EXPECT_EQ(bools.int_at(0), 1);
  EXPECT_EQ(bools.int_at(1), 0);
  EXPECT_EQ(f.get_array("strings", GgufValueType::STRING).strings, (std::vector<std::string>{"x", "", "yz"}));
  const GgufValue& nested = f.get_array("nested", GgufValueType::ARRAY);
  ASSERT_EQ(nested.items.size(), 2u);
  EXPECT_EQ(nested.items[0].int_at(0), 1);
  EXPECT_EQ(nested.items[0].int_at(1), 2);
  EXPECT_EQ(nested.items[1].count, 1u);
  EXPECT_EQ(nested.items[1].int_at(0), 3);
  EXPECT_EQ(f.tensors().size(), 0u);

  // Wrong-type access is an error naming the key.
  try {
    f.get_string("u32");
    ADD_FAILURE();
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("u32 is a u32, expected a string"), std::string::npos) << e.what();
  }
  EXPECT_THROW(f.get_int("missing.key"), ModelError);
  EXPECT_THROW(f.get_array("strings", GgufValueType::I32), ModelError);
}

TEST(GgufReader, TensorsAndAlignment) {
  for (uint64_t alignment : {32u, 64u, 8u}) {
    GgufWriter w = small_file();
    w.alignment = alignment;
    if (alignment != 32) w.add_u32("general.alignment", static_cast<uint32_t>(alignment));
    const std::string path = test::temp_file_path("align.gguf");
    w.write(path);
    GgufFile f(path);
    std::filesystem::remove(path);
    EXPECT_EQ(f.alignment(), alignment);
    EXPECT_EQ(f.data_offset() % alignment, 0u);
    EXPECT_EQ(f.data_offset(), w.data_offset);
    const GgufTensorInfo* a = f.find_tensor("a");
    const GgufTensorInfo* b = f.find_tensor("b");
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->dims, (std::vector<uint64_t>{4, 2}));
    EXPECT_EQ(a->n_elements, 8u);
    EXPECT_EQ(a->n_bytes, 32u);
    EXPECT_EQ(b->offset % alignment, 0u);
    float v[3];
    std::memcpy(v, f.tensor_data(*b), 12);
    EXPECT_EQ(v[0], 9.0f);
    EXPECT_EQ(v[2], 11.0f);
  }
}

TEST(GgufReader, BadMagicAndVersions) {
  std::vector<uint8_t> good = small_file().bytes();
  auto bad = good;
  bad[0] = 'X';
  expect_error(bad, "magic", "bad magic");
  for (uint32_t version : {1u, 4u, 0xFFFFFFFFu}) {
    bad = good;
    std::memcpy(bad.data() + 4, &version, 4);
    expect_error(bad, "version", "version");
  }
  expect_error({}, "empty", "bad magic");
  expect_error({'G', 'G'}, "two_bytes", "bad magic");
}

TEST(GgufReader, MissingFileNamesIt) {
  try {
    GgufFile f("/nonexistent/dir/model.gguf");
    ADD_FAILURE();
  } catch (const InputError& e) {  // the one file-opening rule (core/util/input_file.h), exit 2
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/model.gguf"), std::string::npos);
  }
}

TEST(GgufReader, TruncatedAtEveryOffset) {
  const std::vector<uint8_t> good = small_file().bytes();
  ASSERT_TRUE(parse_error(good, "whole").empty());
  for (size_t n = 0; n < good.size(); ++n) {
    const std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_FALSE(parse_error(cut, "cut").empty()) << "truncated to " << n << " bytes accepted";
  }
}

TEST(GgufReader, TruncatedTinyModelThroughTheLoader) {
  test::TinyLlama spec;
  const std::vector<uint8_t> good = spec.writer().bytes();
  // Every offset through the metadata and tensor infos, then a stride through the data.
  for (size_t n = 0; n < good.size(); n += (n < 12000 ? 7 : 997)) {
    const std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_FALSE(parse_error(cut, "cutmodel", true).empty()) << "truncated to " << n << " bytes accepted";
  }
}

// Header with the given counts followed by `rest`.
std::vector<uint8_t> header(uint64_t tensors, uint64_t kvs, const std::vector<uint8_t>& rest) {
  return cat({le<uint32_t>(0x46554747), le<uint32_t>(3), le<uint64_t>(tensors), le<uint64_t>(kvs), rest});
}
std::vector<uint8_t> gstr(const std::string& s) {
  std::vector<uint8_t> b = le<uint64_t>(s.size());
  b.insert(b.end(), s.begin(), s.end());
  return b;
}

TEST(GgufReader, HugeCountsAndLengths) {
  const std::vector<uint8_t> pad(64, 0);
  expect_error(header(uint64_t{1} << 60, 0, pad), "tensors", "tensors");
  expect_error(header(0, uint64_t{1} << 62, pad), "kvs", "metadata entries");
  expect_error(header(0, 1, cat({le<uint64_t>(~uint64_t{0}), pad})), "keylen", "metadata key");
  expect_error(header(0, 1, cat({gstr("k"), le<uint32_t>(8), le<uint64_t>(uint64_t{1} << 63), pad})), "strlen", "string");
  expect_error(header(0, 1, cat({gstr("k"), le<uint32_t>(9), le<uint32_t>(0), le<uint64_t>(uint64_t{1} << 61), pad})),
               "arraylen", "array");
  expect_error(header(0, 1, cat({gstr("k"), le<uint32_t>(9), le<uint32_t>(8), le<uint64_t>(1000000), pad})),
               "strarray", "");
  expect_error(header(0, 1, cat({gstr("k"), le<uint32_t>(13), pad})), "valuetype", "invalid value type 13");
  expect_error(header(0, 1, cat({gstr("k"), le<uint32_t>(9), le<uint32_t>(77), le<uint64_t>(1), pad})), "elemtype",
               "invalid array element type");
  // Arrays nested 20 deep.
  std::vector<uint8_t> deep;
  for (int i = 0; i < 20; ++i) deep = cat({deep, le<uint32_t>(9), le<uint64_t>(1)});
  expect_error(header(0, 1, cat({gstr("k"), le<uint32_t>(9), deep, pad})), "deep", "nested deeper");
  expect_error(header(0, 1, cat({gstr("k"), le<uint32_t>(10), le<uint64_t>(~uint64_t{0}), pad})), "u64", "out of range");
}

// One tensor info: name, dims, type, offset.
std::vector<uint8_t> tinfo(const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
  std::vector<uint8_t> b = cat({gstr(name), le<uint32_t>(static_cast<uint32_t>(dims.size()))});
  for (uint64_t d : dims) b = cat({b, le<uint64_t>(d)});
  return cat({b, le<uint32_t>(type), le<uint64_t>(offset)});
}
// A file with the given tensor infos and `data_bytes` of data after 32-byte alignment.
std::vector<uint8_t> with_tensors(std::initializer_list<std::vector<uint8_t>> infos, size_t data_bytes) {
  std::vector<uint8_t> b = header(infos.size(), 0, {});
  for (const auto& i : infos) b = cat({b, i});
  b.resize((b.size() + 31) / 32 * 32 + data_bytes, 0);
  return b;
}

TEST(GgufReader, BadTensorInfos) {
  EXPECT_TRUE(parse_error(with_tensors({tinfo("t", {8}, 0, 0)}, 32), "ok").empty());
  expect_error(with_tensors({tinfo("t", {8}, 0, 0)}, 31), "short", "outside the data section");
  expect_error(with_tensors({tinfo("t", {8}, 0, 1u << 20)}, 32), "far", "outside the data section");
  expect_error(with_tensors({tinfo("t", {8}, 0, ~uint64_t{0} - 31)}, 32), "wrap", "");
  expect_error(with_tensors({tinfo("t", {8}, 0, 4)}, 64), "unaligned", "not a multiple of the alignment");
  expect_error(with_tensors({tinfo("t", {8}, 0, 0), tinfo("u", {8}, 0, 0)}, 64), "overlap", "overlap");
  expect_error(with_tensors({tinfo("t", {8}, 0, 0), tinfo("t", {8}, 0, 32)}, 64), "dupname", "duplicate tensor name t");
  expect_error(with_tensors({tinfo("t", {8}, 77, 0)}, 64), "type", "unknown ggml type id 77");
  expect_error(with_tensors({tinfo("t", {1, 1, 1, 1, 1}, 0, 0)}, 64), "dims5", "5 dimensions");
  expect_error(with_tensors({tinfo("t", {}, 0, 0)}, 64), "dims0", "0 dimensions");
  expect_error(with_tensors({tinfo("t", {8, 0}, 0, 0)}, 64), "zerodim", "invalid dimension");
  expect_error(with_tensors({tinfo("t", {uint64_t{1} << 32, uint64_t{1} << 32, 16}, 0, 0)}, 64), "overflow", "");
  expect_error(with_tensors({tinfo("t", {33}, 8, 0)}, 64), "blocks", "block size 32");
  expect_error(with_tensors({tinfo(std::string(300, 'n'), {8}, 0, 0)}, 64), "longname", "tensor name");
}

TEST(GgufReader, BadAlignment) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufWriter w = small_file();
    w.add_u32("general.alignment", a);
    expect_error(w.bytes(), "alignment", "general.alignment");
  }
  GgufWriter w = small_file();
  w.add_string("general.alignment", "32");
  expect_error(w.bytes(), "alignment_type", "general.alignment");
}

// Random corruption of the header, metadata and tensor infos of a tiny model: every outcome must
// be a loaded model or a ModelError (the test binary crashing or hanging would be the failure).
TEST(GgufReader, RandomCorruptionNeverCrashes) {
  test::TinyLlama spec;
  spec.n_layers = 1;
  GgufWriter w = spec.writer();
  const std::vector<uint8_t> good = w.bytes();
  const size_t meta_end = w.data_offset;
  std::mt19937 rng(12345);
  int rejected = 0;
  const int trials = 300;
  for (int trial = 0; trial < trials; ++trial) {
    std::vector<uint8_t> b = good;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t at = rng() % meta_end;
      b[at] = static_cast<uint8_t>(rng() % 3 == 0 ? 0xFF : rng());
    }
    const std::string path = test::temp_file_path("fuzz.gguf");
    GgufWriter::write_bytes(path, b);
    try {
      load_gguf(path);
    } catch (const ModelError& e) {
      ++rejected;
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    }
    std::filesystem::remove(path);
  }
  EXPECT_GT(rejected, trials / 4);  // the corruption does hit checks
}

}  // namespace
}  // namespace kvevict
