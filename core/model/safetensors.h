#pragma once
// Bounds-checked reader for the safetensors format (Hugging Face), one file or a folder of shards.
//
// File layout (https://github.com/huggingface/safetensors, "Format"):
//   file   := header_len:u64le  header:JSON[header_len]  data
//   header := { "__metadata__"?: {string: string},
//               name: { "dtype": DTYPE, "shape": [u64...], "data_offsets": [begin, end] } ... }
//   begin/end are byte offsets relative to the start of `data`, begin <= end <= len(data), and
//   end - begin = prod(shape) * sizeof(dtype). Tensors are little-endian, row-major.
// Every check is made when the file is opened: a hostile header (huge length, non-object JSON,
// negative or overflowing offsets, sizes that disagree with the shape, overlapping tensors) raises
// ModelError(file, what). Tensors of types other than F32/F16/BF16 may be present, but reading
// one as float raises ModelError naming the tensor and its dtype.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/util/byte_reader.h"

namespace kvevict {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;            // as written: "F32", "F16", "BF16", "I64", ...
  std::vector<uint64_t> shape;
  uint64_t n_elements = 0;
  const uint8_t* data = nullptr;  // inside the mapped file; not necessarily aligned
  size_t n_bytes = 0;
  std::string file;             // path of the shard holding it
};

// Bytes per element of a safetensors dtype name; 0 if the name is not a safetensors dtype.
size_t safetensors_dtype_size(const std::string& dtype);

// One mapped .safetensors file.
class SafetensorsFile {
 public:
  // Header JSON larger than this is refused before it is read (the reference library uses 100 MB).
  static constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

  explicit SafetensorsFile(const std::string& path);  // maps and validates; throws ModelError

  const std::string& path() const { return file_.path(); }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile file_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a model, possibly spread over shards.
class SafetensorsModel {
 public:
  // A folder: uses model.safetensors.index.json when present (its weight_map names the shard of
  // each tensor; every shard must exist in the folder and hold the tensors mapped to it), else
  // every *.safetensors file in the folder. A tensor name found in two shards is an error.
  static SafetensorsModel open_folder(const std::string& dir);
  // Explicit list of shard files.
  static SafetensorsModel open_files(const std::vector<std::string>& paths);

  const SafetensorsTensor* find(const std::string& name) const;  // nullptr if absent
  const SafetensorsTensor& get(const std::string& name) const;   // throws ModelError if absent
  std::vector<std::string> names() const;
  const std::vector<std::string>& shard_paths() const { return shard_paths_; }
  const std::string& source() const { return source_; }  // folder or file used in error messages

  // Reads a tensor as float32, checking its shape equals `expected_shape` exactly.
  // Throws ModelError(shard, ...) naming the tensor on a missing tensor, a shape mismatch or an
  // unsupported dtype.
  std::vector<float> read_f32(const std::string& name, const std::vector<uint64_t>& expected_shape) const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsTensor*> by_name_;
  std::vector<std::string> shard_paths_;
  std::string source_;
};

// Converts a tensor's elements to float32 (F32, F16, BF16 only); throws ModelError otherwise.
void safetensors_to_f32(const SafetensorsTensor& tensor, float* out);

std::string shape_string(const std::vector<uint64_t>& shape);  // "[4, 8]"

}  // namespace kvevict
