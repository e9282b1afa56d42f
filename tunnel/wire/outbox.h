// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <deque>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"

#include "tunnel/wire/packet.h"

namespace sluice::wire {

// Serialises writes on one gRPC bidi stream: gRPC allows one outstanding StartWrite, while
// packets for a stream come from many threads. `Reactor` is a Server- or ClientBidiReactor
// whose OnWriteDone calls OnWriteDone() here. Never blocks; the queue is bounded by the
// callers' per-connection accounting (STYLE 3.2 "Tunnel streams"). Thread-safe.
template <typename Reactor>
class Outbox final {
 public:
  explicit Outbox(Reactor* reactor) : reactor_(reactor) {}
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
    queue_.push_back(Entry{std::move(packet), std::move(on_written)});
    if (!writing_) {
      writing_ = true;
      reactor_->StartWrite(&queue_.front().packet);
    }
    return true;
  }

  // From the reactor's OnWriteDone. Returns false once the stream refused a write.
  bool OnWriteDone(bool ok) {
    absl::AnyInvocable<void()> done;
    {
      absl::MutexLock lock(&mu_);
      queued_bytes_ -= PacketBytes(queue_.front().packet);
      done = std::move(queue_.front().on_written);
      queue_.pop_front();
      if (!ok) {
        closed_ = true;
      }
      if (!closed_ && !queue_.empty()) {
        reactor_->StartWrite(&queue_.front().packet);
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

  Reactor* const reactor_;
  mutable absl::Mutex mu_;
  std::deque<Entry> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::wire
