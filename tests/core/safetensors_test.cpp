// The safetensors reader: round trips through F32/F16/BF16, shards, and hostile files that must
// give ModelError naming the file (never a crash or a read outside the file).
#include "core/model/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/model/dequant.h"
#include "core/util/error.h"
#include "safetensors_writer.h"

namespace kvevict {
namespace {

using test::StDtype;
using test::StTensor;

template <class F>
std::string model_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {  // ModelError or InputError (a missing or non-regular file): both exit 2
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a ModelError or InputError";
  return "";
}

std::string write_file(const std::string& test_name, const std::string& bytes) {
  auto dir = test::fresh_dir("st_" + test_name);
  auto path = dir / "model.safetensors";
  test::write_bytes(path, bytes);
  return path.string();
}

std::vector<float> exact_values(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (static_cast<float>(i % 97) - 48.0f) / 64.0f;  // exact in f16 and bf16
  return v;
}

class SafetensorsRoundTrip : public ::testing::TestWithParam<StDtype> {};

TEST_P(SafetensorsRoundTrip, ExactValuesComeBackUnchanged) {
  const StDtype dtype = GetParam();
  std::vector<StTensor> tensors = {{"a.weight", {3, 5}, exact_values(15), dtype},
                                   {"b.bias", {7}, exact_values(7), dtype},
                                   {"empty", {0, 4}, {}, dtype}};
  std::string path = write_file(std::string("exact_") + test::st_dtype_name(dtype), test::st_bytes(tensors));
  SafetensorsModel model = SafetensorsModel::open_files({path});
  EXPECT_EQ(model.names().size(), 3u);
  EXPECT_EQ(model.get("a.weight").dtype, test::st_dtype_name(dtype));
  EXPECT_EQ(model.read_f32("a.weight", {3, 5}), exact_values(15));
  EXPECT_EQ(model.read_f32("b.bias", {7}), exact_values(7));
  EXPECT_TRUE(model.read_f32("empty", {0, 4}).empty());
}

TEST_P(SafetensorsRoundTrip, RandomValuesRoundWithinTheFormatsPrecision) {
  const StDtype dtype = GetParam();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> values(4096);
  for (auto& v : values) v = normal(rng);
  std::string path = write_file(std::string("random_") + test::st_dtype_name(dtype),
                                test::st_bytes({{"w", {64, 64}, values, dtype}}));
  std::vector<float> back = SafetensorsModel::open_files({path}).read_f32("w", {64, 64});
  // Round to nearest: relative error at most half an ulp (2^-11 for f16, 2^-8 for bf16).
  const float rel = dtype == StDtype::F32 ? 0.0f : dtype == StDtype::F16 ? 1.0f / 2048 : 1.0f / 256;
  float worst = 0.0f;
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_LE(std::fabs(back[i] - values[i]), rel * std::fabs(values[i]) + 1e-7f) << i;
    worst = std::max(worst, std::fabs(back[i] - values[i]));
  }
  if (dtype != StDtype::F32) {
    EXPECT_GT(worst, 0.0f) << "a lossy format should have rounded something";
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SafetensorsRoundTrip, ::testing::Values(StDtype::F32, StDtype::F16, StDtype::BF16),
                         [](const auto& info) { return std::string(test::st_dtype_name(info.param)); });

// The converters come from core/model/dequant.h; checked here on the values safetensors relies on.
TEST(Safetensors, HalfAndBfloatBitPatterns) {
  EXPECT_EQ(fp16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_float(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(fp16_to_float(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(fp16_to_float(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(fp16_to_float(0x3555), (1.0f + 0x155 / 1024.0f) / 4.0f);
  EXPECT_TRUE(std::signbit(fp16_to_float(0x8000)));
  EXPECT_EQ(fp16_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7e00)));
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc040), -3.0f);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7fc0)));
}

TEST(Safetensors, ReadingWithTheWrongShapeNamesTheTensor) {
  std::string path = write_file("wrong_shape", test::st_bytes({{"w", {3, 5}, exact_values(15), StDtype::F32}}));
  auto model = SafetensorsModel::open_files({path});
  std::string msg = model_error([&] { model.read_f32("w", {5, 3}); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("'w' has shape [3, 5], expected [5, 3]"), std::string::npos) << msg;
  msg = model_error([&] { model.read_f32("nope", {1}); });
  EXPECT_NE(msg.find("'nope' is missing"), std::string::npos) << msg;
}

TEST(Safetensors, UnsupportedDtypeNamesTensorAndDtype) {
  std::string data(16, '\0');
  std::string path =
      write_file("i64", test::st_raw(R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", data));
  auto model = SafetensorsModel::open_files({path});  // other dtypes may be present...
  std::string msg = model_error([&] { model.read_f32("ids", {2}); });  // ...but not read as weights
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("'ids' has dtype I64"), std::string::npos) << msg;
}

struct HostileCase {
  const char* name;
  std::string bytes;
  const char* expected;  // part of the message
};

std::vector<HostileCase> hostile_cases() {
  const std::string ok_entry = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string data8(8, '\0');
  std::string huge_len(8, '\0');
  uint64_t n = 1ull << 62;
  std::memcpy(huge_len.data(), &n, 8);
  std::string past_eof(8, '\0');
  n = 100;
  std::memcpy(past_eof.data(), &n, 8);
  return {
      {"empty_file", "", "truncated"},
      {"short_length", "abc", "truncated"},
      {"huge_header_length", huge_len + "{}", "exceeds"},
      {"header_length_past_eof", past_eof + "{}", "runs past the end of the file"},
      {"invalid_json", test::st_raw("{\"w\": ", ""), "invalid JSON"},
      {"array_header", test::st_raw("[1,2,3]", ""), "header must be a JSON object"},
      {"deep_nesting", test::st_raw(std::string(100000, '[') + std::string(100000, ']'), ""), "nested deeper"},
      {"offsets_past_eof", test::st_raw(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "1234"),
       "run past the end of the data section"},
      {"negative_offset", test::st_raw(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", data8),
       "non-negative integer"},
      {"overflowing_offset",
       test::st_raw(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,184467440737095516160]}})", data8),
       "non-negative integer"},
      {"end_before_begin", test::st_raw(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", data8),
       "end before they begin"},
      {"size_mismatch", test::st_raw(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8),
       "needs 12 bytes but data_offsets span 8"},
      {"shape_overflow",
       test::st_raw(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", data8),
       "overflow"},
      {"negative_dim", test::st_raw(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8),
       "non-negative integer"},
      {"unknown_dtype", test::st_raw(R"({"w":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", data8),
       "unknown dtype 'F33'"},
      {"missing_offsets", test::st_raw(R"({"w":{"dtype":"F32","shape":[2]}})", data8), "data_offsets"},
      {"entry_not_object", test::st_raw(R"({"w":[1,2]})", data8), "entry must be an object"},
      {"bad_metadata", test::st_raw(R"({"__metadata__":{"a":1},)" + ok_entry + "}", data8), "__metadata__"},
      {"overlap",
       test::st_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                    data8),
       "overlap"},
  };
}

TEST(Safetensors, HostileFilesGiveModelErrorNamingTheFile) {
  for (const auto& c : hostile_cases()) {
    SCOPED_TRACE(c.name);
    std::string path = write_file(std::string("hostile_") + c.name, c.bytes);
    std::string msg = model_error([&] { SafetensorsFile file(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << msg;
  }
}

// Random corruption of a valid file (bytes of the header and length overwritten, truncation):
// every outcome is either a clean load or a ModelError, never a crash or another exception.
TEST(Safetensors, RandomCorruptionLoadsOrFailsCleanly) {
  const std::string good = test::st_bytes({{"a.weight", {4, 6}, exact_values(24), StDtype::F16},
                                           {"b", {5}, exact_values(5), StDtype::F32},
                                           {"c", {2, 3}, exact_values(6), StDtype::BF16}});
  uint64_t header_len;
  std::memcpy(&header_len, good.data(), 8);
  const size_t header_end = 8 + header_len;
  const std::string path = (test::fresh_dir("st_corrupt") / "model.safetensors").string();
  std::mt19937 rng(2024);
  int loaded = 0, refused = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string bytes = good;
    const int kind = trial % 3;
    if (kind == 0) {  // overwrite 1-4 bytes anywhere in the length or the header
      for (int k = 1 + static_cast<int>(rng() % 4); k > 0; --k) bytes[rng() % header_end] = static_cast<char>(rng());
    } else if (kind == 1) {  // replace a digit of the header by another digit (offsets, shapes)
      std::vector<size_t> digits;
      for (size_t i = 8; i < header_end; ++i) {
        if (bytes[i] >= '0' && bytes[i] <= '9') digits.push_back(i);
      }
      bytes[digits[rng() % digits.size()]] = static_cast<char>('0' + rng() % 10);
    } else {  // truncate
      bytes.resize(rng() % bytes.size());
    }
    test::write_bytes(path, bytes);
    try {
      SafetensorsFile file(path);
      std::vector<float> out;
      for (const auto& t : file.tensors()) {
        out.resize(t.n_elements);
        if (t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16") safetensors_to_f32(t, out.data());
      }
      ++loaded;
    } catch (const ModelError& e) {
      ASSERT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, 100);  // at least the truncations
  EXPECT_GT(loaded, 0);  // some digit swaps keep the file valid (e.g. "0" -> "0")
}

TEST(Safetensors, ShardsWithoutIndexAreAllRead) {
  auto dir = test::fresh_dir("st_shards");
  test::write_bytes(dir / "model-00001-of-00002.safetensors", test::st_bytes({{"a", {2}, {1, 2}, StDtype::F32}}));
  test::write_bytes(dir / "model-00002-of-00002.safetensors", test::st_bytes({{"b", {1}, {3}, StDtype::BF16}}));
  auto model = SafetensorsModel::open_folder(dir.string());
  EXPECT_EQ(model.shard_paths().size(), 2u);
  EXPECT_EQ(model.read_f32("a", {2}), (std::vector<float>{1, 2}));
  EXPECT_EQ(model.read_f32("b", {1}), (std::vector<float>{3}));
  EXPECT_EQ(model.get("b").file, (dir / "model-00002-of-00002.safetensors").string());
}

TEST(Safetensors, TensorInTwoShardsIsAnError) {
  auto dir = test::fresh_dir("st_dup");
  test::write_bytes(dir / "model-00001-of-00002.safetensors", test::st_bytes({{"a", {2}, {1, 2}, StDtype::F32}}));
  test::write_bytes(dir / "model-00002-of-00002.safetensors", test::st_bytes({{"a", {2}, {1, 2}, StDtype::F32}}));
  std::string msg = model_error([&] { SafetensorsModel::open_folder(dir.string()); });
  EXPECT_NE(msg.find("model-00002-of-00002.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'a' is also in"), std::string::npos) << msg;
}

TEST(Safetensors, IndexJsonIsCheckedAgainstTheShards) {
  auto dir = test::fresh_dir("st_index");
  test::write_bytes(dir / "model-00001-of-00002.safetensors", test::st_bytes({{"a", {2}, {1, 2}, StDtype::F32}}));
  test::write_bytes(dir / "model-00002-of-00002.safetensors", test::st_bytes({{"b", {1}, {3}, StDtype::F16}}));
  // A stray file not named by the index is not read.
  test::write_bytes(dir / "stray.safetensors", "garbage");
  const auto index = dir / "model.safetensors.index.json";
  test::write_bytes(index, R"({"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})");
  auto model = SafetensorsModel::open_folder(dir.string());
  EXPECT_EQ(model.read_f32("b", {1}), (std::vector<float>{3}));

  test::write_bytes(index, R"({"weight_map":{"a":"model-00002-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})");
  std::string msg = model_error([&] { SafetensorsModel::open_folder(dir.string()); });
  EXPECT_NE(msg.find(index.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;

  test::write_bytes(index, R"({"weight_map":{"a":"../model-00001-of-00002.safetensors"}})");
  msg = model_error([&] { SafetensorsModel::open_folder(dir.string()); });
  EXPECT_NE(msg.find("not a file in the model folder"), std::string::npos) << msg;

  test::write_bytes(index, R"({"weight_map":{"a":"model-00009-of-00009.safetensors"}})");
  msg = model_error([&] { SafetensorsModel::open_folder(dir.string()); });
  EXPECT_NE(msg.find("model-00009-of-00009.safetensors"), std::string::npos) << msg;

  test::write_bytes(index, R"({"weight_map":[]})");
  msg = model_error([&] { SafetensorsModel::open_folder(dir.string()); });
  EXPECT_NE(msg.find("weight_map"), std::string::npos) << msg;
}

TEST(Safetensors, FolderWithoutShardsIsAnError) {
  auto dir = test::fresh_dir("st_none");
  std::string msg = model_error([&] { SafetensorsModel::open_folder(dir.string()); });
  EXPECT_NE(msg.find("no *.safetensors"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kvevict
