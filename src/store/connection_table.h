// ConnectionTable: a server's open connections by id, for a store that
// holds thousands of them, mostly idle. An open-addressing hash table of
// pointers (linear probing, at most 3/4 full, deletion by backward shift):
// 11-21 bytes a connection, where a std::unordered_map of shared pointers
// costs a 48-byte node and a bucket (about 56). The key is the element's own
// `id`, which the table reads through the pointer; `Ptr` is any nullable
// pointer that owns or counts its element (store: ConnectionPtr), and the
// table holds one for each.
//
// Thread-safety: none; the server's one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace trun::store {

template <typename Ptr>
class ConnectionTable {
 public:
  using Element = typename Ptr::element_type;

  size_t size() const { return size_; }

  // Adds `p`, whose id is in the table no more.
  void Add(Ptr p) {
    if ((size_ + 1) * 4 > slots_.size() * 3) Grow();
    size_t i = FreeSlotFor(p->id);
    slots_[i] = std::move(p);
    ++size_;
  }

  // The element with `id`, or nullptr. (An element, not the table's
  // pointer to it: an erase moves those.)
  Element* Find(uint64_t id) const {
    size_t i = SlotOf(id);
    return i == kNone ? nullptr : slots_[i].get();
  }

  // Removes the element with `id`, if there is one, and returns it.
  Ptr Erase(uint64_t id) {
    size_t hole = SlotOf(id);
    if (hole == kNone) return Ptr();
    Ptr gone = std::move(slots_[hole]);
    slots_[hole] = Ptr();
    --size_;
    // Backward shift: each element after the hole, up to the next empty
    // slot, moves into the hole when the hole lies between its home slot
    // and where it is, so that every lookup's probe still reaches it.
    for (size_t i = Next(hole); slots_[i]; i = Next(i)) {
      size_t home = Home(slots_[i]->id);
      bool movable = hole < i ? (home <= hole || home > i) : (home <= hole && home > i);
      if (!movable) continue;
      slots_[hole] = std::move(slots_[i]);
      slots_[i] = Ptr();
      hole = i;
    }
    return gone;
  }

  // Calls f(const Ptr&) for every element, in no order. `f` may not add or
  // erase.
  template <typename F>
  void ForEach(F&& f) const {
    for (const Ptr& p : slots_) {
      if (p) f(p);
    }
  }

  void Clear() {
    slots_.clear();
    slots_.shrink_to_fit();
    size_ = 0;
  }

 private:
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();

  size_t SlotOf(uint64_t id) const {
    if (slots_.empty()) return kNone;
    for (size_t i = Home(id);; i = Next(i)) {
      if (!slots_[i]) return kNone;
      if (slots_[i]->id == id) return i;
    }
  }

  // Fibonacci hashing: ids come in sequence, and the product's top bits
  // spread neighbours apart.
  size_t Home(uint64_t id) const {
    return static_cast<size_t>((id * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  size_t Next(size_t i) const { return (i + 1) & (slots_.size() - 1); }

  size_t FreeSlotFor(uint64_t id) const {
    size_t i = Home(id);
    while (slots_[i]) i = Next(i);
    return i;
  }

  void Grow() {
    std::vector<Ptr> old = std::move(slots_);
    size_t n = old.empty() ? 64 : old.size() * 2;
    slots_ = std::vector<Ptr>(n);
    shift_ = 64;
    for (size_t k = n; k > 1; k /= 2) --shift_;
    for (Ptr& p : old) {
      if (!p) continue;
      size_t i = FreeSlotFor(p->id);
      slots_[i] = std::move(p);
    }
  }

  std::vector<Ptr> slots_;  // a power of two of them; null: empty
  int shift_ = 64;          // 64 less log2 of slots_.size()
  size_t size_ = 0;
};

}  // namespace trun::store
