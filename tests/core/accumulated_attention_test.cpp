// The accumulated attention held on the scoring device (core/engine/accumulated_attention_store.h):
// the CPU twin, which runs the kernel's element body, against the host engine's rule written out
// plainly (accumulated_attention_cases.h), bit for bit over random appends, adds and keeps; and the
// bookkeeping's refusals.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "accumulated_attention_cases.h"
#include "core/engine/accumulated_rebuild.h"

namespace kvevict {
namespace {

std::unique_ptr<AccumulatedAttentionStore> twin() { return make_accumulated_attention_store(SelectionDevice::Twin); }

TEST(AccumulatedAttentionStore, TwinMatchesTheHostRuleBitForBit) {
  // The twin's "device" memory is host memory: the packed sums are handed as they are.
  std::vector<float> held;
  const test::DeviceSums as_device = [&](const std::vector<float>& packed, int rows, int64_t stride) {
    held = packed;
    return ColumnSumsSignal{held.data(), rows, stride};
  };
  int reads = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    auto store = twin();
    reads += test::run_accumulated_script(*store, seed, 120, as_device);
  }
  EXPECT_GT(reads, 40 * 6);
}

TEST(AccumulatedAttentionStore, AKeepComposesWithTheOnesBeforeIt) {
  auto store = twin();
  store->reset(1, 1, 1);
  const std::vector<int64_t> five{5};
  store->add(0, five, std::vector<std::vector<float>>{{1, 2, 3, 4, 5}});
  store->keep(0, 0, std::vector<int>{4, 0, 2}, 5);        // gives 5, 1, 3
  store->keep(0, 0, std::vector<int>{3, 1, 0}, 4);        // an appended entry (zero), then 1, 5
  EXPECT_EQ(store->lengths(0), std::vector<int64_t>{3});
  const std::vector<int64_t> four{4};                      // one more appended since
  EXPECT_EQ(store->read(0, four, 0), (std::vector<float>{0, 1, 5, 0}));
  store->add(0, four, std::vector<std::vector<float>>{{10, 20, 30, 40}});
  EXPECT_EQ(store->read(0, four, 0), (std::vector<float>{10, 21, 35, 40}));
}

TEST(AccumulatedAttentionStore, RefusesWhatTheBookkeepingCannotExplain) {
  auto store = twin();
  store->reset(2, 2, 2);
  const std::vector<int64_t> lengths{3, 2};
  store->add(0, lengths, std::vector<std::vector<float>>(4, std::vector<float>{1, 1, 1}));
  // Fewer entries than held with no keep, a lengths list of the wrong size, a layer out of range.
  EXPECT_THROW(store->read(0, std::vector<int64_t>{2, 2}, 0), std::logic_error);
  EXPECT_THROW(store->read(0, std::vector<int64_t>{3}, 0), std::logic_error);
  EXPECT_THROW(store->read(2, lengths, 0), std::logic_error);
  EXPECT_THROW(store->read(0, lengths, 2), std::logic_error);
  // A kept index past the head, a keep over fewer entries than the head gives.
  EXPECT_THROW(store->keep(0, 0, std::vector<int>{3}, 3), std::logic_error);
  EXPECT_THROW(store->keep(0, 0, std::vector<int>{0}, 2), std::logic_error);
  // Column sums of the wrong shape: rows for another group, a stride shorter than a head.
  std::vector<float> sums(8, 1.0f);
  EXPECT_THROW(store->add(0, lengths, ColumnSumsSignal{sums.data(), 2, 4}), std::logic_error);
  EXPECT_THROW(store->add(0, lengths, ColumnSumsSignal{sums.data(), 4, 2}), std::logic_error);
  EXPECT_THROW(store->add(0, lengths, ColumnSumsSignal{}), std::logic_error);
  EXPECT_THROW(store->add(0, lengths, std::vector<std::vector<float>>(3)), std::logic_error);
  // Nothing was changed by the refusals.
  EXPECT_EQ(store->read(0, lengths, 0), std::vector<float>(6, 1.0f));
}

TEST(AccumulatedAttentionStore, HostSelectionHoldsNoDeviceStore) {
  EXPECT_EQ(make_accumulated_attention_store(SelectionDevice::Host), nullptr);
}

}  // namespace
}  // namespace kvevict
