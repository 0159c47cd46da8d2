#include "core/model/ggml_types.h"

namespace kvevict {
namespace {

struct Entry {
  uint32_t id;
  GgmlTypeTraits traits;
};

// Block sizes from ggml's block structs (ggml-common.h): e.g. Q4_1 = fp16 d + fp16 m + 16 nibble bytes.
constexpr Entry kTypes[] = {
    {0, {"F32", 1, 4, true}},        {1, {"F16", 1, 2, true}},         {2, {"Q4_0", 32, 18, true}},
    {3, {"Q4_1", 32, 20, true}},     {6, {"Q5_0", 32, 22, false}},     {7, {"Q5_1", 32, 24, false}},
    {8, {"Q8_0", 32, 34, true}},     {9, {"Q8_1", 32, 36, false}},     {10, {"Q2_K", 256, 84, false}},
    {11, {"Q3_K", 256, 110, false}}, {12, {"Q4_K", 256, 144, true}},   {13, {"Q5_K", 256, 176, false}},
    {14, {"Q6_K", 256, 210, true}},  {15, {"Q8_K", 256, 292, false}},  {24, {"I8", 1, 1, false}},
    {25, {"I16", 1, 2, false}},      {26, {"I32", 1, 4, false}},       {27, {"I64", 1, 8, false}},
    {28, {"F64", 1, 8, false}},      {30, {"BF16", 1, 2, true}},
};

}  // namespace

const GgmlTypeTraits* ggml_type_traits(uint32_t type) {
  for (const Entry& e : kTypes) {
    if (e.id == type) return &e.traits;
  }
  return nullptr;
}

std::string ggml_type_name(uint32_t type) {
  const GgmlTypeTraits* t = ggml_type_traits(type);
  return t ? std::string(t->name) : "type " + std::to_string(type);
}

std::string supported_ggml_types() {
  std::string out;
  for (const Entry& e : kTypes) {
    if (!e.traits.dequantizable) continue;
    if (!out.empty()) out += ", ";
    out += e.traits.name;
  }
  return out;
}

}  // namespace kvevict
