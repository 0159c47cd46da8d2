// libFuzzer target: any byte string as a .safetensors file. SafetensorsFile must validate it or
// throw a kvevict::Error; every tensor of a file that validates is converted to float32.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/model/safetensors.h"
#include "core/util/error.h"
#include "fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kvevict::fuzz::MemFile file(data, size);
  try {
    kvevict::SafetensorsFile st(file.path());
    for (const auto& tensor : st.tensors()) {
      if (tensor.n_elements > (1u << 20)) continue;  // a legitimately large tensor: not the point here
      std::vector<float> out(tensor.n_elements);
      try {
        kvevict::safetensors_to_f32(tensor, out.data());
      } catch (const kvevict::Error&) {
      }
    }
  } catch (const kvevict::Error&) {
  }
  return 0;
}
