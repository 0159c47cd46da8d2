#pragma once
// One (layer, stored head)'s keys or values: `rows()` rows of `width` elements of a KvType, stored
// contiguously. Rows go in and come out as f32 (converted once per row written or read); an F32
// store also hands out its float pointer, so the reference path copies nothing. Shrinking keeps
// the capacity (the KV cache reuses the freed tail for later appends).
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/decode/kv_type.h"

namespace kvevict {

class KvRows {
 public:
  KvRows() = default;
  KvRows(KvType type, int width) : type_(type), width_(static_cast<size_t>(width)) {}

  KvType type() const { return type_; }
  size_t rows() const { return width_ == 0 ? 0 : (type_ == KvType::F32 ? f32_.size() : bits_.size()) / width_; }

  void append(const float* row);
  // Rows [t0, t1) converted to f32 into out ([t1 - t0][width]).
  void read(size_t t0, size_t t1, float* out) const;
  void write(size_t t, const float* row);  // overwrites row t from f32
  void copy_row(size_t dst, size_t src) { copy_row_from(dst, *this, src); }
  // Row `src` of `from` (same type and width) to row `dst` of this, without conversion.
  void copy_row_from(size_t dst, const KvRows& from, size_t src);
  void resize(size_t rows);
  void release();  // empty and free the memory
  void shrink_to_fit();

  size_t row_bytes() const { return width_ * kv_type_size(type_); }
  size_t capacity_bytes() const { return f32_.capacity() * sizeof(float) + bits_.capacity() * sizeof(uint16_t); }
  // The stored elements: f32() for an F32 store, bits16() (binary16 / bfloat16 patterns) otherwise;
  // nullptr for the other type.
  const float* f32() const { return type_ == KvType::F32 ? f32_.data() : nullptr; }
  float* mutable_f32() { return type_ == KvType::F32 ? f32_.data() : nullptr; }
  const uint16_t* bits16() const { return type_ == KvType::F32 ? nullptr : bits_.data(); }

 private:
  KvType type_ = KvType::F32;
  size_t width_ = 0;
  std::vector<float> f32_;
  std::vector<uint16_t> bits_;
};

}  // namespace kvevict
