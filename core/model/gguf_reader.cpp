#include "core/model/gguf_reader.h"

#include <algorithm>
#include <limits>

#include "core/model/dequant.h"
#include "core/model/ggml_types.h"
#include "core/util/quote.h"

namespace kvevict {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr uint64_t kMaxKeyLength = 65535;
constexpr uint64_t kMaxStringLength = uint64_t{1} << 26;  // 64 MiB: generous for chat templates
constexpr uint64_t kMaxTensorNameLength = 256;           // ggml itself allows 64
// Memory per parsed item is bounded too, not only file bytes: a string costs ~32 bytes in memory
// for 8 in the file, a metadata entry or tensor info a few hundred. Real files stay far below
// these caps (vocabularies ~10^5 strings, ~10^3 tensors, ~10^2 metadata entries).
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 28;
constexpr uint64_t kMaxStringArrayElements = uint64_t{1} << 24;
constexpr uint64_t kMaxMetadataEntries = uint64_t{1} << 16;
constexpr int kMaxArrayDepth = 8;
constexpr uint64_t kMaxNestedArrays = uint64_t{1} << 20;  // caps memory for arrays of arrays
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kMaxTensors = uint64_t{1} << 17;
constexpr uint64_t kMaxElementsPerTensor = uint64_t{1} << 40;
constexpr uint64_t kMaxAlignment = uint64_t{1} << 24;

// Bytes one element of `type` occupies at least (strings: their u64 length; arrays: type + count).
uint64_t min_value_bytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::BOOL: return 1;
    case GgufValueType::U16: case GgufValueType::I16: return 2;
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
    case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: return 8;
    case GgufValueType::STRING: return 8;
    case GgufValueType::ARRAY: return 12;
  }
  return 1;
}

bool is_scalar_numeric(GgufValueType t) { return t != GgufValueType::STRING && t != GgufValueType::ARRAY; }

bool valid_value_type(uint32_t t) { return t <= 12; }

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  static const char* const kNames[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                       "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(type);
  return i < 13 ? kNames[i] : "invalid";
}

bool GgufValue::is_integer() const { return is_scalar_numeric(type) && !is_float(); }

int64_t GgufValue::int_at(uint64_t i) const {
  if (!is_array() || !is_scalar_numeric(element_type) || i >= count) throw std::out_of_range("GgufValue::int_at");
  const uint8_t* p = raw.data() + i * min_value_bytes(element_type);
  auto load = [&](auto v) { std::memcpy(&v, p, sizeof(v)); return v; };
  switch (element_type) {
    case GgufValueType::U8: return load(uint8_t{});
    case GgufValueType::I8: return load(int8_t{});
    case GgufValueType::BOOL: return load(uint8_t{}) != 0;
    case GgufValueType::U16: return load(uint16_t{});
    case GgufValueType::I16: return load(int16_t{});
    case GgufValueType::U32: return load(uint32_t{});
    case GgufValueType::I32: return load(int32_t{});
    case GgufValueType::U64: return static_cast<int64_t>(load(uint64_t{}));
    case GgufValueType::I64: return load(int64_t{});
    case GgufValueType::F32: return static_cast<int64_t>(load(float{}));
    case GgufValueType::F64: return static_cast<int64_t>(load(double{}));
    default: break;
  }
  throw std::out_of_range("GgufValue::int_at");
}

double GgufValue::float_at(uint64_t i) const {
  if (!is_array() || i >= count) throw std::out_of_range("GgufValue::float_at");
  const uint8_t* p = raw.data() + i * min_value_bytes(element_type);
  if (element_type == GgufValueType::F32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (element_type == GgufValueType::F64) {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  return static_cast<double>(int_at(i));
}

GgufFile::GgufFile(const std::string& path) : file_(path) { parse(); }

// string := u64:length bytes{length}
std::string GgufFile::read_gguf_string(ByteReader& r, uint64_t max_length, const char* what) {
  const size_t at = r.offset();
  const uint64_t n = r.read<uint64_t>();
  if (n > max_length || n > r.remaining()) {
    fail(std::string(what) + " at offset " + std::to_string(at) + " claims " + std::to_string(n) + " bytes (" +
         std::to_string(r.remaining()) + " left in the file, limit " + std::to_string(max_length) + ")");
  }
  return r.read_string(static_cast<size_t>(n), what);
}

// array := u32:element_type u64:count value{count}
GgufValue GgufFile::read_array(ByteReader& r, int depth, const std::string& key) {
  if (depth >= kMaxArrayDepth) fail("metadata " + quote_input(key) + ": arrays nested deeper than " + std::to_string(kMaxArrayDepth));
  GgufValue v;
  v.type = GgufValueType::ARRAY;
  const uint32_t et = r.read<uint32_t>();
  if (!valid_value_type(et)) fail("metadata " + quote_input(key) + ": invalid array element type " + std::to_string(et));
  v.element_type = static_cast<GgufValueType>(et);
  const size_t at = r.offset();
  v.count = r.read<uint64_t>();
  const uint64_t min_bytes = min_value_bytes(v.element_type);
  const uint64_t cap = v.element_type == GgufValueType::STRING ? kMaxStringArrayElements : kMaxArrayElements;
  if (v.count > cap || v.count > r.remaining() / min_bytes) {
    fail("metadata " + quote_input(key) + ": array at offset " + std::to_string(at) + " claims " + std::to_string(v.count) +
         " elements of type " + gguf_value_type_name(v.element_type) + ", more than the " +
         std::to_string(r.remaining()) + " bytes left can hold");
  }
  if (is_scalar_numeric(v.element_type)) {
    const size_t bytes = static_cast<size_t>(v.count * min_bytes);  // <= remaining, no overflow
    const uint8_t* p = r.take(bytes, "array");
    v.raw.assign(p, p + bytes);
  } else if (v.element_type == GgufValueType::STRING) {
    v.strings.reserve(static_cast<size_t>(v.count));
    for (uint64_t i = 0; i < v.count; ++i) v.strings.push_back(read_gguf_string(r, kMaxStringLength, "string"));
  } else {
    nested_arrays_ += v.count;  // v.count <= kMaxArrayElements, so this cannot overflow
    if (nested_arrays_ > kMaxNestedArrays) fail("metadata " + quote_input(key) + ": too many nested arrays");
    v.items.reserve(static_cast<size_t>(v.count));
    for (uint64_t i = 0; i < v.count; ++i) v.items.push_back(read_array(r, depth + 1, key));
  }
  return v;
}

// value := one of the 13 value types
GgufValue GgufFile::read_value(ByteReader& r, GgufValueType type, int depth, const std::string& key) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufValueType::U8: v.int_value = r.read<uint8_t>(); break;
    case GgufValueType::I8: v.int_value = r.read<int8_t>(); break;
    case GgufValueType::U16: v.int_value = r.read<uint16_t>(); break;
    case GgufValueType::I16: v.int_value = r.read<int16_t>(); break;
    case GgufValueType::U32: v.int_value = r.read<uint32_t>(); break;
    case GgufValueType::I32: v.int_value = r.read<int32_t>(); break;
    case GgufValueType::BOOL: v.int_value = r.read<uint8_t>() != 0; break;
    case GgufValueType::I64: v.int_value = r.read<int64_t>(); break;
    case GgufValueType::U64: {
      const uint64_t u = r.read<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        fail("metadata " + quote_input(key) + ": u64 value " + std::to_string(u) + " is out of range");
      }
      v.int_value = static_cast<int64_t>(u);
      break;
    }
    case GgufValueType::F32: v.float_value = r.read<float>(); break;
    case GgufValueType::F64: v.float_value = r.read<double>(); break;
    case GgufValueType::STRING: v.string_value = read_gguf_string(r, kMaxStringLength, "string"); break;
    case GgufValueType::ARRAY: return read_array(r, depth, key);
  }
  return v;
}

// file := header kv{metadata_kv_count} tensor_info{tensor_count} padding data
void GgufFile::parse() {
  ByteReader r(file_.data(), file_.size(), file_.path());
  if (file_.size() < 4 || r.read<uint32_t>() != kMagic) fail("not a GGUF file (bad magic)");
  version_ = r.read<uint32_t>();
  if (version_ == 1) fail("GGUF version 1 is not supported (only versions 2 and 3)");
  if (version_ != 2 && version_ != 3) fail("unsupported GGUF version " + std::to_string(version_) + " (expected 2 or 3)");
  const uint64_t tensor_count = r.read<uint64_t>();
  const uint64_t kv_count = r.read<uint64_t>();
  if (kv_count > kMaxMetadataEntries || kv_count > r.remaining() / 13) {
    fail("header claims " + std::to_string(kv_count) + " metadata entries, more than the limit of " +
         std::to_string(kMaxMetadataEntries) + " or what the " + std::to_string(r.remaining()) +
         " bytes left can hold (truncated or corrupt file)");
  }
  if (tensor_count > kMaxTensors || tensor_count > r.remaining() / 24) {
    fail("header claims " + std::to_string(tensor_count) + " tensors, more than the limit of " + std::to_string(kMaxTensors) +
         " or what the " + std::to_string(r.remaining()) + " bytes left can hold (truncated or corrupt file)");
  }

  // kv := string:key u32:value_type value
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key = read_gguf_string(r, kMaxKeyLength, "metadata key");
    const size_t at = r.offset();
    const uint32_t t = r.read<uint32_t>();
    if (!valid_value_type(t)) fail("metadata " + quote_input(key) + ": invalid value type " + std::to_string(t) + " at offset " + std::to_string(at));
    GgufValue v = read_value(r, static_cast<GgufValueType>(t), 0, key);
    if (metadata_.count(key)) fail("duplicate metadata key " + quote_input(key));
    metadata_.emplace(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (!a->is_integer() || a->type == GgufValueType::BOOL) fail("general.alignment must be an integer");
    if (a->int_value <= 0 || static_cast<uint64_t>(a->int_value) > kMaxAlignment ||
        (a->int_value & (a->int_value - 1)) != 0) {
      fail("general.alignment " + std::to_string(a->int_value) + " is not a power of two up to " + std::to_string(kMaxAlignment));
    }
    alignment_ = static_cast<uint64_t>(a->int_value);
  }

  read_tensor_infos(r, tensor_count);
  const uint64_t end_of_infos = r.offset();
  data_offset_ = (end_of_infos + alignment_ - 1) / alignment_ * alignment_;  // no overflow: offset <= file size
  check_tensor_layout();
}

// tensor_info := string:name u32:n_dims u64:ne{n_dims} u32:ggml_type u64:offset
void GgufFile::read_tensor_infos(ByteReader& r, uint64_t count) {
  tensors_.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) {
    GgufTensorInfo t;
    t.name = read_gguf_string(r, kMaxTensorNameLength, "tensor name");
    const uint32_t n_dims = r.read<uint32_t>();
    if (n_dims == 0 || n_dims > kMaxDims) {
      fail("tensor " + quote_input(t.name) + " has " + std::to_string(n_dims) + " dimensions (expected 1.." + std::to_string(kMaxDims) + ")");
    }
    t.n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = r.read<uint64_t>();
      if (ne == 0 || ne > kMaxElementsPerTensor) fail("tensor " + quote_input(t.name) + " has invalid dimension " + std::to_string(ne));
      t.dims.push_back(ne);
      t.n_elements = checked_mul(t.n_elements, ne, path(), kMaxElementsPerTensor);
    }
    t.type = r.read<uint32_t>();
    const GgmlTypeTraits* traits = ggml_type_traits(t.type);
    if (!traits) fail("tensor " + quote_input(t.name) + " has unknown ggml type id " + std::to_string(t.type));
    if (t.dims[0] % traits->block_elements != 0) {
      fail("tensor " + quote_input(t.name) + " of type " + traits->name + " has rows of " + std::to_string(t.dims[0]) +
           " elements, not a multiple of the block size " + std::to_string(traits->block_elements));
    }
    t.n_bytes = ggml_tensor_bytes(t.type, t.n_elements, path(), t.name);
    t.offset = r.read<uint64_t>();
    if (t.offset % alignment_ != 0) {
      fail("tensor " + quote_input(t.name) + " offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
           std::to_string(alignment_));
    }
    if (tensor_index_.count(t.name)) fail("duplicate tensor name " + quote_input(t.name));
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }
}

void GgufFile::check_tensor_layout() {
  const uint64_t data_size = data_offset_ <= file_.size() ? file_.size() - data_offset_ : 0;
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      fail("tensor " + quote_input(t.name) + " (offset " + std::to_string(t.offset) + ", " + std::to_string(t.n_bytes) +
           " bytes) lies outside the data section (" + std::to_string(data_size) + " bytes from offset " +
           std::to_string(data_offset_) + ")");
    }
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& prev = *by_offset[i - 1];
    if (prev.offset + prev.n_bytes > by_offset[i]->offset) {
      fail("tensors " + quote_input(prev.name) + " and " + quote_input(by_offset[i]->name) + " overlap");
    }
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<std::string> GgufFile::opt_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::STRING) fail("metadata " + quote_input(key) + " is a " + gguf_value_type_name(v->type) + ", expected a string");
  return v->string_value;
}

std::string GgufFile::get_string(const std::string& key) const {
  auto v = opt_string(key);
  if (!v) fail("missing metadata " + key);
  return *v;
}

std::optional<int64_t> GgufFile::opt_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_integer() || v->type == GgufValueType::BOOL) {
    fail("metadata " + quote_input(key) + " is a " + gguf_value_type_name(v->type) + ", expected an integer");
  }
  return v->int_value;
}

int64_t GgufFile::get_int(const std::string& key) const {
  auto v = opt_int(key);
  if (!v) fail("missing metadata " + key);
  return *v;
}

std::optional<double> GgufFile::opt_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_float()) return v->float_value;
  if (v->is_integer() && v->type != GgufValueType::BOOL) return static_cast<double>(v->int_value);
  fail("metadata " + quote_input(key) + " is a " + gguf_value_type_name(v->type) + ", expected a number");
}

double GgufFile::get_float(const std::string& key) const {
  auto v = opt_float(key);
  if (!v) fail("missing metadata " + key);
  return *v;
}

std::optional<bool> GgufFile::opt_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufValueType::BOOL) fail("metadata " + quote_input(key) + " is a " + gguf_value_type_name(v->type) + ", expected a bool");
  return v->int_value != 0;
}

const GgufValue* GgufFile::opt_array(const std::string& key, GgufValueType element) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  if (!v->is_array()) fail("metadata " + quote_input(key) + " is a " + gguf_value_type_name(v->type) + ", expected an array");
  if (v->element_type != element) {
    fail("metadata " + quote_input(key) + " is an array of " + gguf_value_type_name(v->element_type) + ", expected " +
         gguf_value_type_name(element));
  }
  return v;
}

const GgufValue& GgufFile::get_array(const std::string& key, GgufValueType element) const {
  const GgufValue* v = opt_array(key, element);
  if (!v) fail("missing metadata " + key);
  return *v;
}

}  // namespace kvevict
