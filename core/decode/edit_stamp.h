#pragma once
// A value naming one arrangement of a head's existing entries, for readers that keep something
// derived from them and want to extend it instead of rebuilding it (the engine's per-step report,
// its threshold decode steps): while a head's stamp is unchanged, its entries only gained new ones
// at the end, so the first n entries a reader saw are still the first n, with the same positions.
//
// Contract. The owner renews the stamp whenever an entry already in the head leaves, moves or is
// given another position; appending leaves it. Every value is drawn once from one process-wide
// counter (never 0), so two stamps are equal only if one was never renewed since the other was
// read: a stamp copied, moved or assigned on its own takes a fresh value, because a copy of a cache
// may go on differently from its original. (A container moved whole, whose elements are not moved
// one by one, carries its stamps along with the very same entries: still true.) Renewing too often is always correct (readers rebuild); missing a
// renewal is the bug this contract rules out.
#include <atomic>
#include <cstdint>

namespace kvevict {

class EditStamp {
 public:
  EditStamp() : value_(next()) {}
  EditStamp(const EditStamp&) : value_(next()) {}
  EditStamp& operator=(const EditStamp&) {
    value_ = next();
    return *this;
  }
  void renew() { value_ = next(); }
  uint64_t value() const { return value_; }

 private:
  static uint64_t next() {
    static std::atomic<uint64_t> counter{1};
    return counter.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t value_;
};

}  // namespace kvevict
