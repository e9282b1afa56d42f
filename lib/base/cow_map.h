// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <iterator>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace sluice::base {

// A sorted map whose copies share its entries: it is a run of small std::maps (chunks) held by
// shared_ptr, so a copy costs one pointer per chunk, and a change to a copy copies only the
// chunk it touches (when another copy still holds it). The control plane keeps one and hands
// immutable copies to readers each sync: 10,000 entries then cost ~80 pointer copies and one
// chunk instead of 10,000 node allocations.
// Thread: one writer per map; a copy may be read on other threads while the original changes
// (a chunk shared with a copy is never written).
template <typename K, typename V>
class CowMap {
  using Chunk = std::map<K, V>;
  using Chunks = std::vector<std::shared_ptr<Chunk>>;

 public:
  using key_type = K;
  using mapped_type = V;
  using value_type = typename Chunk::value_type;

  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = typename Chunk::value_type;
    using difference_type = std::ptrdiff_t;
    using pointer = const value_type*;
    using reference = const value_type&;

    const_iterator() = default;
    reference operator*() const { return *it_; }
    pointer operator->() const { return &*it_; }
    const_iterator& operator++() {
      if (++it_ == (*chunks_)[chunk_]->end()) {
        ++chunk_;
        it_ = chunk_ < chunks_->size() ? (*chunks_)[chunk_]->cbegin()
                                       : typename Chunk::const_iterator();
      }
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator before = *this;
      ++*this;
      return before;
    }
    friend bool operator==(const const_iterator& a, const const_iterator& b) {
      return a.chunk_ == b.chunk_ && a.it_ == b.it_;
    }

   private:
    friend class CowMap;
    const_iterator(const Chunks* chunks, size_t chunk, typename Chunk::const_iterator it)
        : chunks_(chunks), chunk_(chunk), it_(it) {}
    const Chunks* chunks_ = nullptr;
    size_t chunk_ = 0;  // chunks_->size() at the end, with a value-initialized it_
    typename Chunk::const_iterator it_{};
  };
  using iterator = const_iterator;

  CowMap() = default;
  explicit CowMap(const std::map<K, V>& entries) {
    for (const auto& [key, value] : entries) {
      insert_or_assign(key, value);
    }
  }

  const_iterator begin() const {
    return chunks_.empty() ? end() : const_iterator(&chunks_, 0, chunks_[0]->cbegin());
  }
  const_iterator end() const { return const_iterator(&chunks_, chunks_.size(), {}); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The first entry whose key is not less than `key`.
  const_iterator lower_bound(const K& key) const {
    const size_t i = ChunkOf(key);
    return i == chunks_.size() ? end() : const_iterator(&chunks_, i, chunks_[i]->lower_bound(key));
  }
  const_iterator find(const K& key) const {
    const size_t i = ChunkOf(key);
    if (i == chunks_.size()) {
      return end();
    }
    auto it = chunks_[i]->find(key);
    return it == chunks_[i]->end() ? end() : const_iterator(&chunks_, i, it);
  }
  bool contains(const K& key) const { return find(key) != end(); }

  // Adds `key` unless present; returns whether it did.
  bool emplace(const K& key, V value) {
    if (contains(key)) {
      return false;
    }
    insert_or_assign(key, std::move(value));
    return true;
  }
  void insert_or_assign(const K& key, V value) {
    if (chunks_.empty()) {
      chunks_.push_back(std::make_shared<Chunk>());
      chunks_.back()->emplace(key, std::move(value));
      size_ = 1;
      return;
    }
    // Past the last chunk's keys: the last chunk grows.
    const size_t i = std::min(ChunkOf(key), chunks_.size() - 1);
    Chunk& chunk = Writable(i);
    size_ += chunk.insert_or_assign(key, std::move(value)).second ? 1 : 0;
    if (chunk.size() > 2 * kChunk) {
      auto tail = std::make_shared<Chunk>();
      auto mid = std::next(chunk.begin(), static_cast<std::ptrdiff_t>(chunk.size() / 2));
      while (mid != chunk.end()) {
        tail->insert(chunk.extract(mid++));
      }
      chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(i) + 1, std::move(tail));
    }
  }
  // Removes `key`; returns whether it was there.
  bool erase(const K& key) {
    const size_t i = ChunkOf(key);
    if (i == chunks_.size() || !chunks_[i]->contains(key)) {
      return false;
    }
    Chunk& chunk = Writable(i);
    chunk.erase(key);
    --size_;
    if (chunk.empty()) {
      chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(i));
    }
    return true;
  }

 private:
  // A chunk splits in two past twice this: 64 entries copy in a few microseconds.
  static constexpr size_t kChunk = 64;

  // The first chunk whose last key is not less than `key`; chunks_.size() when none.
  size_t ChunkOf(const K& key) const {
    auto it = std::partition_point(chunks_.begin(), chunks_.end(),
                                   [&](const auto& chunk) { return chunk->rbegin()->first < key; });
    return static_cast<size_t>(it - chunks_.begin());
  }
  // Chunk i, copied first if a copy of this map shares it.
  Chunk& Writable(size_t i) {
    std::shared_ptr<Chunk>& chunk = chunks_[i];
    if (chunk.use_count() == 1) {
      // A copy that let go of it on another thread read it before: see those reads done.
      std::atomic_thread_fence(std::memory_order_acquire);
    } else {
      chunk = std::make_shared<Chunk>(*chunk);
    }
    return *chunk;
  }

  Chunks chunks_;  // none empty; each one's keys above the previous one's
  size_t size_ = 0;
};

}  // namespace sluice::base
