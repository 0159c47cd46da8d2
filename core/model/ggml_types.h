#pragma once
// ggml tensor types as GGUF stores them: the numeric id, a printable name and the block geometry
// (elements per block, bytes per block). Knowing the geometry of every common type lets the GGUF
// reader bounds-check tensors even of types kvevict cannot dequantise.
#include <cstdint>
#include <string>

namespace kvevict {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
};

struct GgmlTypeTraits {
  const char* name;
  uint32_t block_elements;  // elements per block (1 for plain types)
  uint32_t block_bytes;     // bytes per block
  bool dequantizable;       // kvevict can turn it into f32 and multiply it in place (core/decode/quant_dot.h)
};

// Traits of a type id, or nullptr when the id is not one kvevict knows the layout of.
const GgmlTypeTraits* ggml_type_traits(uint32_t type);

// "Q4_1", or "type 123" for an unknown id.
std::string ggml_type_name(uint32_t type);

// Names of the dequantisable types, comma separated (for error messages and docs).
std::string supported_ggml_types();

}  // namespace kvevict
