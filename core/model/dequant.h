#pragma once
// Dequantisation of ggml tensor data to float32, written from the block layouts that ggml documents
// (ggml-common.h). Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K. Data is read as
// little-endian bytes with memcpy, so any alignment is fine.
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvevict {

// IEEE half and bfloat16 bit patterns to float (subnormals, infinities and NaN included).
float fp16_to_float(uint16_t bits);
float bf16_to_float(uint16_t bits);

// Bytes taken by `n_elements` of `type`; throws ModelError(file, ...) naming `tensor` when the type is
// unknown or `n_elements` is not a whole number of blocks.
size_t ggml_tensor_bytes(uint32_t type, uint64_t n_elements, const std::string& file, const std::string& tensor);

// Dequantises `n_elements` values of `type` from `src` (exactly ggml_tensor_bytes(...) bytes) into `dst`.
// Throws ModelError(file, "tensor <name> has type <T>, which kvevict cannot dequantise (supported: ...)")
// for types without a dequantiser.
// Q4_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed scale bytes.
void q4_k_scale_min(int j, const uint8_t* scales, int& scale, int& min);

void dequantize(uint32_t type, const uint8_t* src, uint64_t n_elements, float* dst, const std::string& file,
                const std::string& tensor);

// The index (row * cols + column) of the first non-finite value of a matrix kept in its file format
// (`rows` rows of `cols` values of `type`, `row_bytes` apart from `data`), or -1 when every value
// is finite: what the loaders check before they keep such a matrix (NaN or infinite weights only
// ever give garbage logits). F16 and BF16 are read as bit patterns (every exponent bit set: an
// infinity or a NaN), without dequantising; other types are dequantised a row at a time (dequantize's
// errors). Rows are checked in parallel (OpenMP); the answer does not depend on the thread count.
int64_t first_non_finite(uint32_t type, const uint8_t* data, uint64_t rows, uint64_t cols, size_t row_bytes,
                         const std::string& file, const std::string& tensor);

}  // namespace kvevict
