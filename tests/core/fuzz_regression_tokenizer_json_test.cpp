// tokenizer.json: an id beyond the number of entries (which must leave a hole, since ids are 0..N-1)
// is not stored, so the table never grows past the entries in the file. Before, a 90-byte file
// asking for id 4,000,000 made the reader allocate 4M strings (128 MB) before reporting the hole.
// The test reads such files in a child process whose address space may grow by at most 64 MB.
#include <sys/resource.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "core/tokenizer/hf_tokenizer.h"
#include "core/util/error.h"
#include "safetensors_writer.h"

namespace kvevict {
namespace {

using nlohmann::json;

size_t address_space_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  size_t kb = 0;
  while (status >> key) {
    if (key == "VmSize:") {
      status >> kb;
      break;
    }
  }
  return kb << 10;
}

// In the child: exit 0 when loading gives a ModelError naming the file and `expected`, 1 on another
// error or success, 3 when memory ran out.
void load_with_little_memory(const std::filesystem::path& dir, const std::string& expected) {
  const rlimit limit{address_space_bytes() + (64u << 20), RLIM_INFINITY};
  setrlimit(RLIMIT_AS, &limit);
  try {
    load_hf_tokenizer(find_hf_tokenizer_files(dir.string()));
  } catch (const ModelError& e) {
    const std::string m = e.what();
    std::_Exit(m.find(expected) != std::string::npos && m.rfind(dir.string(), 0) == 0 ? 0 : 1);
  } catch (const std::bad_alloc&) {
    std::_Exit(3);
  } catch (...) {
  }
  std::_Exit(1);
}

TEST(FuzzRegressionTokenizerJson, AnIdBeyondTheEntriesIsRefusedWithoutGrowingTheTable) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  json tok = test::tiny_tokenizer_json();  // 259 vocab entries + 3 added tokens
  tok["model"]["vocab"]["far"] = 4000000;
  auto dir = test::fresh_dir("tokjson_vocab_id");
  test::write_bytes(dir / "tokenizer.json", tok.dump());
  EXPECT_EXIT(load_with_little_memory(dir, "token id 262 is missing"), testing::ExitedWithCode(0), "");

  tok = test::tiny_tokenizer_json();
  tok["added_tokens"].push_back({{"id", 4000000}, {"content", "<x>"}, {"special", true}});
  dir = test::fresh_dir("tokjson_added_id");
  test::write_bytes(dir / "tokenizer.json", tok.dump());
  EXPECT_EXIT(load_with_little_memory(dir, "token id 262 is missing"), testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace kvevict
