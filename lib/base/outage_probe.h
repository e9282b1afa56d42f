// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "lib/base/clock.h"

namespace sluice::base {

// Finds an unreachable server (an API server, an etcd cluster) back for all of its clients at
// once. Without it each client retries on its own growing backoff, and after a long outage the
// first retry that meets the restarted server can be tens of seconds late, a different time for
// each client. While any client reports the server unreachable, one cheap probe runs at a fixed
// short interval; the first answer releases every waiting client together.
// Thread-safe; owns a thread that probes while a client waits and sleeps otherwise.
class OutageProbe final {
 public:
  struct Options {
    std::string server;  // for logs: "API server https://...", "etcd"
    // Probes start at least this far apart (also across outages, so a server that answers the
    // probe but fails every request cannot make clients spin): a server that answers again is
    // found within this, whatever the length of the outage.
    absl::Duration interval = absl::Milliseconds(500);
  };
  struct Callbacks {
    // OK when the server answered (whatever it answered); called on the probe thread.
    absl::AnyInvocable<absl::Status()> probe;
    // Interrupts a probe in progress and every later one (the destructor calls it).
    absl::AnyInvocable<void()> cancel;
    // Optional: the server answered after at least one failed probe (an outage). Called on the
    // probe thread before the waiting clients are released.
    absl::AnyInvocable<void()> on_recovered;
    // Optional: a probe failed (for a counter). Called on the probe thread.
    absl::AnyInvocable<void()> on_failed;
  };
  // How a wait ended.
  enum class Wait {
    kAnswered,   // the first probe answered: a dropped connection, not an outage
    kRecovered,  // the server answered after an outage: its state may have moved on
    kStopped,    // the client's stop flag is set
  };

  OutageProbe(Options options, Callbacks callbacks, Clock& clock);
  // Cancels a probe in progress and joins the thread; no client may be waiting.
  ~OutageProbe();
  OutageProbe(const OutageProbe&) = delete;
  OutageProbe& operator=(const OutageProbe&) = delete;

  // A client failed to reach the server (refused, reset, timed out). Probing starts; the
  // returned ticket is for Await.
  uint64_t Unreachable() ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until a probe started after Unreachable() returned `ticket` got an answer, or `stop`
  // is true (checked on Wake()).
  Wait Await(uint64_t ticket, const std::atomic<bool>& stop) ABSL_LOCKS_EXCLUDED(mu_);
  // Makes every Await re-check its stop flag (a client's Stop calls it).
  void Wake() ABSL_LOCKS_EXCLUDED(mu_);

  // Probes sent so far.
  int64_t attempts() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  Callbacks callbacks_;
  Clock& clock_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Tickets: a client's ticket is the number of probes started before it; a wait ends when a
  // later probe answers.
  uint64_t started_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t answered_ ABSL_GUARDED_BY(mu_) = 0;      // the last probe that answered (its number)
  uint64_t outage_since_ ABSL_GUARDED_BY(mu_) = 0;  // the first probe that failed; 0: none
  uint64_t recovered_ ABSL_GUARDED_BY(mu_) = 0;     // the probe that ended the last outage
  uint64_t wanted_ ABSL_GUARDED_BY(mu_) = 0;        // the highest ticket handed out, plus one
  MonoTime next_probe_ ABSL_GUARDED_BY(mu_) = MonoTime::InfinitePast();
  Waiter interval_;  // the probe thread's sleep between probes; the destructor stops it
  std::thread thread_;
};

}  // namespace sluice::base
