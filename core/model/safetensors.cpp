#include "core/model/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/model/dequant.h"
#include "core/util/error.h"
#include "core/util/quote.h"
#include "core/util/json_file.h"

namespace kvevict {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian; add byte swapping");

namespace fs = std::filesystem;

size_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

std::string shape_string(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

// An unsigned JSON integer; negative, fractional or > 2^64 values (which nlohmann stores as
// signed or float) are refused.
uint64_t header_u64(const nlohmann::json& v, const std::string& file, const std::string& what) {
  if (!v.is_number_unsigned()) {
    throw ModelError(file, what + " must be a non-negative integer, not " +
                               (v.is_number() ? v.dump() : json_type_name(v)));
  }
  return v.get<uint64_t>();
}

// tensor := { "dtype": DTYPE, "shape": [u64...], "data_offsets": [u64, u64] }
SafetensorsTensor parse_tensor_entry(const std::string& name, const nlohmann::json& entry, const std::string& file,
                                     const uint8_t* data, uint64_t data_size) {
  const std::string where = "tensor '" + quote_input(name) + "'";
  if (!entry.is_object()) throw ModelError(file, where + ": entry must be an object, not " + json_type_name(entry));
  SafetensorsTensor t;
  t.name = name;
  t.file = file;

  auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) throw ModelError(file, where + ": 'dtype' missing or not a string");
  t.dtype = dtype->get<std::string>();
  size_t element_size = safetensors_dtype_size(t.dtype);
  if (element_size == 0) throw ModelError(file, where + ": unknown dtype '" + quote_input(t.dtype) + "'");

  auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) throw ModelError(file, where + ": 'shape' missing or not an array");
  if (shape->size() > 8) throw ModelError(file, where + ": shape has " + std::to_string(shape->size()) + " dimensions");
  t.n_elements = 1;
  for (const auto& d : *shape) {
    uint64_t dim = header_u64(d, file, where + ": shape dimension");
    t.shape.push_back(dim);
    t.n_elements = checked_mul(t.n_elements, dim, file);
  }

  auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2) {
    throw ModelError(file, where + ": 'data_offsets' must be an array [begin, end]");
  }
  uint64_t begin = header_u64((*offsets)[0], file, where + ": data_offsets[0]");
  uint64_t end = header_u64((*offsets)[1], file, where + ": data_offsets[1]");
  if (begin > end) {
    throw ModelError(file, where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                               "] end before they begin");
  }
  if (end > data_size) {
    throw ModelError(file, where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                               "] run past the end of the data section (" + std::to_string(data_size) + " bytes)");
  }
  t.n_bytes = checked_mul(t.n_elements, element_size, file);
  if (end - begin != t.n_bytes) {
    throw ModelError(file, where + ": " + t.dtype + " " + shape_string(t.shape) + " needs " + std::to_string(t.n_bytes) +
                               " bytes but data_offsets span " + std::to_string(end - begin));
  }
  t.data = data + begin;
  return t;
}

}  // namespace

// file := header_len:u64le header:JSON[header_len] data
SafetensorsFile::SafetensorsFile(const std::string& path) : file_(path) {
  ByteReader reader(file_.data(), file_.size(), path);
  uint64_t header_len = reader.read<uint64_t>();
  if (header_len > kMaxHeaderBytes) {
    throw ModelError(path, "header length " + std::to_string(header_len) + " exceeds the " +
                               std::to_string(kMaxHeaderBytes) + "-byte limit (not a safetensors file?)");
  }
  if (header_len > reader.remaining()) {
    throw ModelError(path, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                               std::to_string(reader.remaining()) + " bytes after the length)");
  }
  const uint8_t* header = reader.take(header_len, "header");
  const uint8_t* data = header + header_len;
  const uint64_t data_size = reader.remaining();

  nlohmann::json json = parse_json_text(std::string_view(reinterpret_cast<const char*>(header), header_len),
                                         path + " (header)", 16);
  if (!json.is_object()) throw ModelError(path, "header must be a JSON object, not " + json_type_name(json));

  for (const auto& [key, value] : json.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) throw ModelError(path, "__metadata__ must be an object of strings");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) throw ModelError(path, "__metadata__." + quote_input(mk) + " must be a string");
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    if (key.empty()) throw ModelError(path, "a tensor has an empty name");
    tensors_.push_back(parse_tensor_entry(key, value, path, data, data_size));
  }

  // Two tensors must not share bytes: overlapping views would silently alias weights.
  std::vector<const SafetensorsTensor*> by_offset;
  for (const auto& t : tensors_) {
    if (t.n_bytes > 0) by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->data < b->data; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    if (by_offset[i]->data < prev->data + prev->n_bytes) {
      throw ModelError(path, "tensors '" + quote_input(prev->name) + "' and '" + quote_input(by_offset[i]->name) + "' overlap in the data section");
    }
  }
}

void safetensors_to_f32(const SafetensorsTensor& t, float* out) {
  const uint8_t* p = t.data;
  if (t.dtype == "F32") {
    if (t.n_elements > 0) std::memcpy(out, p, t.n_elements * sizeof(float));  // an empty tensor has no data pointer
  } else if (t.dtype == "F16" || t.dtype == "BF16") {
    const bool is_bf16 = t.dtype == "BF16";
    for (uint64_t i = 0; i < t.n_elements; ++i) {
      uint16_t bits;
      std::memcpy(&bits, p + 2 * i, 2);
      out[i] = is_bf16 ? bf16_to_float(bits) : fp16_to_float(bits);
    }
  } else {
    throw ModelError(t.file, "tensor '" + quote_input(t.name) + "' has dtype " + quote_input(t.dtype) + "; supported: F32, F16, BF16");
  }
}

SafetensorsModel SafetensorsModel::open_files(const std::vector<std::string>& paths) {
  SafetensorsModel model;
  model.source_ = paths.size() == 1 ? paths[0] : (paths.empty() ? "" : fs::path(paths[0]).parent_path().string());
  for (const auto& path : paths) {
    model.files_.push_back(std::make_unique<SafetensorsFile>(path));
    model.shard_paths_.push_back(path);
    for (const auto& t : model.files_.back()->tensors()) {
      auto [it, inserted] = model.by_name_.emplace(t.name, &t);
      if (!inserted) {
        throw ModelError(path, "tensor '" + quote_input(t.name) + "' is also in " + it->second->file + "; which one to use is ambiguous");
      }
    }
  }
  return model;
}

SafetensorsModel SafetensorsModel::open_folder(const std::string& dir) {
  const fs::path folder(dir);
  const fs::path index_path = folder / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::is_regular_file(index_path, ec)) {
    const std::string index_file = index_path.string();
    nlohmann::json index = read_json_file(index_file);
    JsonFields fields(index, index_file);
    const nlohmann::json* weight_map = fields.find("weight_map");
    if (!weight_map || !weight_map->is_object()) fields.fail("weight_map", "must be an object {tensor: shard file}");
    std::set<std::string> shard_names;
    for (const auto& [tensor, shard] : weight_map->items()) {
      if (!shard.is_string()) fields.fail("weight_map." + quote_input(tensor), "must be a file name");
      std::string name = shard.get<std::string>();
      // The index comes from a stranger: it may only name plain files inside this folder.
      if (name.empty() || name.find('/') != std::string::npos || name.find('\\') != std::string::npos ||
          name == "." || name == "..") {
        fields.fail("weight_map." + quote_input(tensor), "names '" + quote_input(name) + "', which is not a file in the model folder");
      }
      shard_names.insert(name);
    }
    if (shard_names.empty()) fields.fail("weight_map", "is empty");
    std::vector<std::string> paths;
    for (const auto& name : shard_names) paths.push_back((folder / name).string());
    SafetensorsModel model = open_files(paths);
    model.source_ = dir;
    for (const auto& [tensor, shard] : weight_map->items()) {
      const std::string shard_path = (folder / shard.get<std::string>()).string();
      const SafetensorsTensor* t = model.find(tensor);
      if (!t || t->file != shard_path) {
        throw ModelError(index_file, "weight_map puts tensor '" + quote_input(tensor) + "' in " + quote_input(shard.get<std::string>()) +
                                         ", which does not hold it");
      }
    }
    return model;
  }

  std::vector<std::string> paths;
  const fs::path single = folder / "model.safetensors";
  if (fs::is_regular_file(single, ec)) {
    paths.push_back(single.string());
  } else {
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
      if (entry.path().extension() == ".safetensors" && entry.is_regular_file(ec)) paths.push_back(entry.path().string());
    }
    if (ec) throw ModelError(dir, "cannot list the folder: " + ec.message());
    std::sort(paths.begin(), paths.end());
  }
  if (paths.empty()) throw ModelError(dir, "no *.safetensors files in the folder");
  SafetensorsModel model = open_files(paths);
  model.source_ = dir;
  return model;
}

const SafetensorsTensor* SafetensorsModel::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

const SafetensorsTensor& SafetensorsModel::get(const std::string& name) const {
  const SafetensorsTensor* t = find(name);
  if (!t) throw ModelError(source_, "tensor '" + quote_input(name) + "' is missing");
  return *t;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : by_name_) out.push_back(name);
  return out;
}

std::vector<float> SafetensorsModel::read_f32(const std::string& name, const std::vector<uint64_t>& expected_shape) const {
  const SafetensorsTensor& t = get(name);
  if (t.shape != expected_shape) {
    throw ModelError(t.file, "tensor '" + quote_input(name) + "' has shape " + shape_string(t.shape) + ", expected " +
                                 shape_string(expected_shape));
  }
  if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") {
    throw ModelError(t.file, "tensor '" + quote_input(name) + "' has dtype " + t.dtype + "; supported: F32, F16, BF16");
  }
  std::vector<float> out(t.n_elements);
  safetensors_to_f32(t, out.data());
  return out;
}

}  // namespace kvevict
