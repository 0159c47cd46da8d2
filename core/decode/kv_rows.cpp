#include "core/decode/kv_rows.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace kvevict {

void KvRows::append(const float* row) {
  if (type_ == KvType::F32) {
    f32_.insert(f32_.end(), row, row + width_);
    return;
  }
  const size_t at = bits_.size();
  bits_.resize(at + width_);
  kv_from_f32(type_, row, bits_.data() + at, width_);
}

void KvRows::read(size_t t0, size_t t1, float* out) const {
  if (type_ == KvType::F32) {
    std::copy(f32_.begin() + t0 * width_, f32_.begin() + t1 * width_, out);
    return;
  }
  kv_to_f32(type_, bits_.data() + t0 * width_, out, (t1 - t0) * width_);
}

void KvRows::write(size_t t, const float* row) {
  if (type_ == KvType::F32) {
    std::copy(row, row + width_, f32_.begin() + t * width_);
    return;
  }
  kv_from_f32(type_, row, bits_.data() + t * width_, width_);
}

void KvRows::copy_row_from(size_t dst, const KvRows& from, size_t src) {
  if (from.type_ != type_ || from.width_ != width_) throw std::logic_error("KvRows::copy_row_from: type or width differs");
  if (type_ == KvType::F32) {
    std::memmove(f32_.data() + dst * width_, from.f32_.data() + src * width_, width_ * sizeof(float));
  } else {
    std::memmove(bits_.data() + dst * width_, from.bits_.data() + src * width_, width_ * sizeof(uint16_t));
  }
}

void KvRows::resize(size_t rows) {
  if (type_ == KvType::F32) {
    f32_.resize(rows * width_);
  } else {
    bits_.resize(rows * width_);
  }
}

void KvRows::release() {
  std::vector<float>().swap(f32_);
  std::vector<uint16_t>().swap(bits_);
}

void KvRows::shrink_to_fit() {
  f32_.shrink_to_fit();
  bits_.shrink_to_fit();
}

}  // namespace kvevict
