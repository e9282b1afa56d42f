// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <deque>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

#include "tunnel/wire/byte_budget.h"
#include "tunnel/wire/packet.h"

namespace sluice::tunnel::wire {

// Serialises writes on one gRPC bidi stream: gRPC allows one outstanding StartWrite, while
// packets for a stream come from many threads. Never blocks; the queue is bounded by the
// callers' per-connection accounting (each connection bounds its own queue and pauses or closes
// only itself). Thread-safe.
class Outbox final {
 public:
  // Starts one write; called with the Outbox's lock held, so it must not block or call back
  // into the Outbox. The stream's OnWriteDone calls OnWriteDone() here. Usually a bidi
  // reactor's StartWrite; a function rather than a reactor type because gRPC's StartWrite is
  // not virtual, so a fuzzer or test can capture writes only through this.
  using Writer = absl::AnyInvocable<void(const Packet*)>;
  // `budget` (optional, outlives us) is charged with what is queued here.
  explicit Outbox(Writer start_write, ByteBudget* budget = nullptr)
      : start_write_(std::move(start_write)), budget_(budget) {}
  ~Outbox() {
    absl::MutexLock lock(&mu_);
    if (budget_ != nullptr) {
      budget_->Release(queued_bytes_);  // discarded with the queue
    }
  }
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  // Queues `packet`; `on_written` runs (on a gRPC thread, no lock held) once gRPC took it.
  // Returns false and drops the packet if the stream is closed.
  bool Send(Packet packet, absl::AnyInvocable<void()> on_written = nullptr) {
    absl::MutexLock lock(&mu_);
    if (closed_) {
      return false;
    }
    queued_bytes_ += PacketBytes(packet);
    if (budget_ != nullptr) {
      budget_->Charge(PacketBytes(packet));
    }
    queue_.push_back(Entry{std::move(packet), std::move(on_written)});
    if (!writing_) {
      writing_ = true;
      start_write_(&queue_.front().packet);
    }
    return true;
  }

  // From the reactor's OnWriteDone. Returns false once the stream refused a write.
  bool OnWriteDone(bool ok) {
    absl::AnyInvocable<void()> done;
    {
      absl::MutexLock lock(&mu_);
      queued_bytes_ -= PacketBytes(queue_.front().packet);
      if (budget_ != nullptr) {
        budget_->Release(PacketBytes(queue_.front().packet));
      }
      done = std::move(queue_.front().on_written);
      queue_.pop_front();
      if (!ok) {
        closed_ = true;
      }
      if (!closed_ && !queue_.empty()) {
        start_write_(&queue_.front().packet);
      } else {
        writing_ = false;
      }
    }
    if (ok && done) {
      done();
    }
    return ok;
  }

  // No write starts after this returns. Queued packets are discarded once gRPC returns the
  // one in flight.
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

  size_t queued_bytes() const {
    absl::MutexLock lock(&mu_);
    return queued_bytes_;
  }

 private:
  struct Entry {
    Packet packet;
    absl::AnyInvocable<void()> on_written;
  };

  Writer start_write_ ABSL_GUARDED_BY(mu_);
  ByteBudget* const budget_;
  mutable absl::Mutex mu_;
  std::deque<Entry> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::tunnel::wire
