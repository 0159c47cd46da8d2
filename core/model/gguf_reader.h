#pragma once
// A bounds-checked reader for GGUF v2/v3 files (ggml's docs/gguf.md), which come from strangers:
//
//   file       := header kv{metadata_kv_count} tensor_info{tensor_count} padding data
//   header     := "GGUF" u32:version(2|3) u64:tensor_count u64:metadata_kv_count
//   kv         := string:key u32:value_type value
//   value      := u8|i8|u16|i16|u32|i32|f32|bool|string|array|u64|i64|f64   (type ids 0..12)
//   array      := u32:element_type u64:count value{count}                    (arrays may nest)
//   string     := u64:length bytes{length}                                   (not NUL-terminated)
//   tensor_info:= string:name u32:n_dims u64:ne{n_dims} u32:ggml_type u64:offset
//   data       := starts at the first multiple of general.alignment (default 32) after the infos;
//                 each tensor's offset is relative to it and a multiple of the alignment.
//
// Every count, length and offset is checked against the bytes left in the file before anything
// is allocated; tensors must lie inside the data section and must not overlap. Any violation is a
// ModelError("<file>: <what>"). The file stays memory-mapped while the GgufFile lives.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/util/byte_reader.h"

namespace kvevict {

enum class GgufValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

const char* gguf_value_type_name(GgufValueType type);

// One metadata value. Scalars keep their numeric value; arrays of scalars keep their raw
// little-endian bytes (compact: a 100 MB u8 array costs 100 MB, not 100M objects), arrays of
// strings keep the strings, nested arrays keep child values.
struct GgufValue {
  GgufValueType type = GgufValueType::U8;
  int64_t int_value = 0;      // integer and bool scalars (u64 values above INT64_MAX are rejected)
  double float_value = 0.0;   // f32 / f64 scalars
  std::string string_value;   // string scalar
  GgufValueType element_type = GgufValueType::U8;  // arrays
  uint64_t count = 0;                              // arrays: number of elements
  std::vector<uint8_t> raw;                        // arrays of scalars
  std::vector<std::string> strings;                // arrays of strings
  std::vector<GgufValue> items;                    // arrays of arrays

  bool is_integer() const;  // any integer type or bool
  bool is_float() const { return type == GgufValueType::F32 || type == GgufValueType::F64; }
  bool is_array() const { return type == GgufValueType::ARRAY; }
  // Element i of a scalar array as a number (throws std::out_of_range on misuse; callers check types).
  int64_t int_at(uint64_t i) const;
  double float_at(uint64_t i) const;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // ne[0] first: the innermost (contiguous) dimension
  uint32_t type = 0;           // ggml type id
  uint64_t offset = 0;         // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
};

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);  // maps and parses; throws ModelError

  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  const GgufValue* find(const std::string& key) const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // The bytes of a tensor (n_bytes of them, inside the mapping).
  const uint8_t* tensor_data(const GgufTensorInfo& tensor) const { return file_.data() + data_offset_ + tensor.offset; }

  // Typed metadata access. `get_*` throw ModelError naming the file and key when the key is
  // missing or has the wrong type; `opt_*` return nullopt when it is missing (and still throw on
  // a wrong type).
  std::string get_string(const std::string& key) const;
  std::optional<std::string> opt_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  std::optional<int64_t> opt_int(const std::string& key) const;
  double get_float(const std::string& key) const;  // accepts integer values too
  std::optional<double> opt_float(const std::string& key) const;
  std::optional<bool> opt_bool(const std::string& key) const;
  // An array whose elements are `element` (throws if missing, not an array, or of another element type).
  const GgufValue& get_array(const std::string& key, GgufValueType element) const;
  const GgufValue* opt_array(const std::string& key, GgufValueType element) const;

  [[noreturn]] void fail(const std::string& what) const { throw ModelError(path(), what); }

 private:
  void parse();
  GgufValue read_value(ByteReader& r, GgufValueType type, int depth, const std::string& key);
  GgufValue read_array(ByteReader& r, int depth, const std::string& key);
  std::string read_gguf_string(ByteReader& r, uint64_t max_length, const char* what);
  void read_tensor_infos(ByteReader& r, uint64_t count);
  void check_tensor_layout();

  MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
  uint64_t nested_arrays_ = 0;  // arrays inside arrays, over the whole file
};

}  // namespace kvevict
