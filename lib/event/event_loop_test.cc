// SPDX-License-Identifier: Apache-2.0
#include "lib/event/event_loop.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "lib/event/loop_thread.h"

namespace sluice::event {
namespace {

class EventLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loop = EventLoop::Create();
    ASSERT_TRUE(loop.ok()) << loop.status();
    loop_ = std::move(*loop);
    // A test that hangs fails instead of blocking the suite.
    watchdog_ = loop_->CreateTimer([this] {
      ADD_FAILURE() << "watchdog fired";
      loop_->Stop();
    });
    watchdog_->Arm(absl::Seconds(10));
  }
  void TearDown() override { watchdog_.reset(); }

  struct PipeFds {
    base::UniqueFd read_end, write_end;
  };
  static PipeFds MakePipe() {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
    return {base::UniqueFd(fds[0]), base::UniqueFd(fds[1])};
  }

  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<Timer> watchdog_;
};

TEST_F(EventLoopTest, PostFromAnotherThreadRunsOnLoopThreadInOrder) {
  std::vector<int> order;
  bool in_loop_thread = false;
  std::thread poster([&] {
    EXPECT_FALSE(loop_->IsInLoopThread());
    for (int i = 0; i < 100; ++i) {
      loop_->Post([&order, i] { order.push_back(i); });
    }
    loop_->Post([&] {
      in_loop_thread = loop_->IsInLoopThread();
      loop_->Stop();
    });
  });
  loop_->Run();
  poster.join();
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(order[i], i);
  }
  EXPECT_TRUE(in_loop_thread);
}

TEST_F(EventLoopTest, StopFromAnotherThread) {
  std::thread stopper([&] { loop_->Stop(); });
  loop_->Run();  // returns whether Stop() lands before or during Run()
  stopper.join();
  // The stop request was consumed: the loop runs again until the next Stop().
  bool ran = false;
  loop_->Post([&] {
    ran = true;
    loop_->Stop();
  });
  loop_->Run();
  EXPECT_TRUE(ran);
}

TEST_F(EventLoopTest, TimersFireInDeadlineThenArmOrder) {
  std::vector<int> fired;
  std::vector<std::unique_ptr<Timer>> timers(5);
  for (int i = 0; i < 5; ++i) {
    timers[i] = loop_->CreateTimer([&fired, i] { fired.push_back(i); });
  }
  timers[0]->Arm(absl::Milliseconds(3));
  timers[1]->Arm(absl::Milliseconds(1));
  timers[2]->Arm(absl::Milliseconds(2));
  timers[3]->Arm(absl::Milliseconds(2));  // armed after 2, so due (just) after it
  timers[4]->Arm(absl::Milliseconds(4));
  auto stop = loop_->CreateTimer([&] { loop_->Stop(); });
  stop->Arm(absl::Milliseconds(5));
  loop_->Run();
  EXPECT_EQ(fired, (std::vector<int>{1, 2, 3, 0, 4}));
  for (auto& t : timers) {
    EXPECT_FALSE(t->armed());
  }
}

TEST_F(EventLoopTest, DisarmAndRearm) {
  int a = 0, b = 0;
  auto ta = loop_->CreateTimer([&] { ++a; });
  auto tb = loop_->CreateTimer([&] { ++b; });
  ta->Arm(absl::Milliseconds(1));
  EXPECT_TRUE(ta->armed());
  ta->Disarm();
  EXPECT_FALSE(ta->armed());
  tb->Arm(absl::Milliseconds(1));
  auto probe = loop_->CreateTimer([&] {
    EXPECT_EQ(b, 0);                 // tb has not fired: its first deadline was replaced
    ta->Arm(absl::Milliseconds(1));  // re-arm a disarmed timer from a timer callback
  });
  // The probe is armed before tb moves, so its deadline stays the earlier one however long this
  // thread is preempted between the two calls (seen with two CPU hogs beside the suite).
  probe->Arm(absl::Milliseconds(2));
  tb->Arm(absl::Milliseconds(3));        // moves the deadline; fires once
  EXPECT_EQ(loop_->armed_timers(), 3u);  // tb + probe + watchdog
  // Polls instead of a fixed stop time, so a loaded machine cannot reorder the test's timers.
  std::unique_ptr<Timer> stop;
  stop = loop_->CreateTimer([&] {
    if (a > 0 && b > 0) {
      loop_->Stop();
    } else {
      stop->Arm(absl::Milliseconds(1));
    }
  });
  stop->Arm(absl::Milliseconds(1));
  loop_->Run();
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 1);
}

TEST_F(EventLoopTest, SelfRearmingZeroDelayTimerFiresOncePerIteration) {
  int fired = 0, iterations = 0;
  std::unique_ptr<Timer> t;
  t = loop_->CreateTimer([&] {
    if (++fired < 10) {
      t->Arm(absl::ZeroDuration());
    } else {
      loop_->Stop();
    }
  });
  // Count iterations through the deferred-delete hook, which runs once per iteration.
  struct Counter : DeferredDeletable {
    explicit Counter(int* n) : n(n) {}
    ~Counter() override { ++*n; }
    int* n;
  };
  t->Arm(absl::ZeroDuration());
  std::unique_ptr<Timer> tick;
  tick = loop_->CreateTimer([&] {
    loop_->DeferDelete(std::make_unique<Counter>(&iterations));
    tick->Arm(absl::ZeroDuration());
  });
  tick->Arm(absl::ZeroDuration());
  loop_->Run();
  EXPECT_EQ(fired, 10);
  EXPECT_GE(iterations, 9);
}

absl::Duration Monotonic() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return absl::DurationFromTimespec(ts);
}

TEST_F(EventLoopTest, TenThousandTimersFireInDeadlineOrder) {
  constexpr int kTimers = 10'000;
  std::mt19937 rng(42);
  std::vector<std::unique_ptr<Timer>> timers;
  // Arm() reads the clock itself, so each deadline is known to lie within [earliest, latest].
  std::vector<absl::Duration> earliest(kTimers), latest(kTimers);
  std::vector<int> fired;
  timers.reserve(kTimers);
  auto arm = [&](int i, absl::Duration after) {
    earliest[i] = Monotonic() + after;
    timers[i]->Arm(after);
    latest[i] = Monotonic() + after;
  };
  for (int i = 0; i < kTimers; ++i) {
    timers.push_back(loop_->CreateTimer([&, i] {
      fired.push_back(i);
      if (fired.size() == kTimers) {
        loop_->Stop();
      }
    }));
    arm(i, absl::Microseconds(rng() % 20'000));
  }
  // Re-arming half of them must leave no stale entries behind.
  for (int i = 0; i < kTimers; i += 2) {
    arm(i, absl::Microseconds(rng() % 20'000));
  }
  loop_->Run();
  ASSERT_EQ(fired.size(), static_cast<size_t>(kTimers));
  for (size_t k = 1; k < fired.size(); ++k) {
    ASSERT_LE(earliest[fired[k - 1]], latest[fired[k]]) << "timer " << fired[k] << " fired late";
  }
  EXPECT_EQ(loop_->armed_timers(), 1u);  // the watchdog
}

TEST_F(EventLoopTest, FileEventOnPipe) {
  PipeFds p = MakePipe();
  std::string got;
  auto fe = loop_->Watch(p.read_end.get(), EPOLLIN, [&](uint32_t events) {
    EXPECT_TRUE(events & EPOLLIN);
    char buf[16];
    ssize_t n = read(p.read_end.get(), buf, sizeof(buf));
    ASSERT_GT(n, 0);
    got.append(buf, n);
    loop_->Stop();
  });
  ASSERT_TRUE(fe.ok()) << fe.status();
  std::thread writer([&] { ASSERT_EQ(write(p.write_end.get(), "hi", 2), 2); });
  loop_->Run();
  writer.join();
  EXPECT_EQ(got, "hi");
}

TEST_F(EventLoopTest, ModifyAfterCancelRegistersAgain) {
  PipeFds p = MakePipe();
  int calls = 0;
  auto fe = loop_->Watch(p.read_end.get(), EPOLLIN, [&](uint32_t) { ++calls; });
  ASSERT_TRUE(fe.ok()) << fe.status();
  ASSERT_EQ(write(p.write_end.get(), "x", 1), 1);
  (*fe)->Cancel();
  EXPECT_FALSE(loop_->RunOnce(absl::ZeroDuration()));  // readable, but no longer watched
  EXPECT_EQ(calls, 0);
  ASSERT_TRUE((*fe)->Modify(EPOLLIN).ok());
  EXPECT_TRUE(loop_->RunOnce(absl::ZeroDuration()));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE((*fe)->Modify(EPOLLIN).ok());  // registered: a plain MOD again
}

TEST_F(EventLoopTest, DetachedHandleHearsNothingAndAdoptTakesTheRegistrationOver) {
  PipeFds p = MakePipe();
  int old_calls = 0, new_calls = 0;
  auto old_fe = loop_->Watch(p.read_end.get(), EPOLLIN, [&](uint32_t) { ++old_calls; });
  ASSERT_TRUE(old_fe.ok()) << old_fe.status();
  ASSERT_EQ(write(p.write_end.get(), "x", 1), 1);
  (*old_fe)->Detach();
  // Still in the epoll set (level-triggered and readable), but reported to no handle.
  EXPECT_FALSE(loop_->RunOnce(absl::ZeroDuration()));
  EXPECT_EQ(old_calls, 0);
  old_fe->reset();
  // A plain Watch would fail with EEXIST; Adopt re-tags the registration with one MOD.
  EXPECT_EQ(loop_->Watch(p.read_end.get(), EPOLLIN, [](uint32_t) {}).status().code(),
            absl::StatusCode::kAlreadyExists);
  auto new_fe = loop_->Adopt(p.read_end.get(), EPOLLIN, [&](uint32_t) { ++new_calls; });
  ASSERT_TRUE(new_fe.ok()) << new_fe.status();
  EXPECT_TRUE(loop_->RunOnce(absl::ZeroDuration()));
  EXPECT_EQ(new_calls, 1);
  EXPECT_EQ(old_calls, 0);
}

TEST_F(EventLoopTest, AdoptAddsAnFdThatIsNotWatched) {
  PipeFds p = MakePipe();
  int calls = 0;
  auto fe = loop_->Adopt(p.read_end.get(), EPOLLIN, [&](uint32_t) { ++calls; });
  ASSERT_TRUE(fe.ok()) << fe.status();
  ASSERT_EQ(write(p.write_end.get(), "x", 1), 1);
  EXPECT_TRUE(loop_->RunOnce(absl::ZeroDuration()));
  EXPECT_EQ(calls, 1);
}

// Detach-then-close relies on close() leaving the epoll set. When the file outlives the fd (a
// dup here; in the wild a /proc reader's or another thread's passing reference), its events
// still come, tagged with a generation no live handle has, even after the slot is reused.
TEST_F(EventLoopTest, EventsOfADetachedSharedFileReachNoHandle) {
  PipeFds p = MakePipe();
  base::UniqueFd dup_of_read(dup(p.read_end.get()));
  ASSERT_TRUE(dup_of_read);
  int old_calls = 0;
  auto old_fe = loop_->Watch(p.read_end.get(), EPOLLIN | EPOLLET, [&](uint32_t) { ++old_calls; });
  ASSERT_TRUE(old_fe.ok()) << old_fe.status();
  (*old_fe)->Detach();
  old_fe->reset();
  p.read_end.Reset();  // the dup keeps the file, so it stays in the epoll set
  PipeFds q = MakePipe();
  int new_calls = 0;
  auto new_fe =
      loop_->Watch(q.read_end.get(), EPOLLIN, [&](uint32_t) { ++new_calls; });  // reuses the slot
  ASSERT_TRUE(new_fe.ok()) << new_fe.status();
  ASSERT_EQ(write(p.write_end.get(), "x", 1), 1);  // an edge for the stale registration only
  loop_->RunOnce(absl::ZeroDuration());
  EXPECT_EQ(old_calls, 0);
  EXPECT_EQ(new_calls, 0);
}

TEST_F(EventLoopTest, ActivateAfterCancelAndModifyIsDelivered) {
  PipeFds p = MakePipe();
  int calls = 0;
  auto fe = loop_->Watch(p.write_end.get(), 0, [&](uint32_t) { ++calls; });
  ASSERT_TRUE(fe.ok()) << fe.status();
  (*fe)->Activate(EPOLLIN);
  (*fe)->Cancel();  // drops the queued activation
  ASSERT_TRUE((*fe)->Modify(0).ok());
  (*fe)->Activate(EPOLLIN);
  EXPECT_TRUE(loop_->RunOnce(absl::ZeroDuration()));
  EXPECT_EQ(calls, 1);
}

TEST_F(EventLoopTest, ModifyAndActivate) {
  PipeFds p = MakePipe();
  std::vector<uint32_t> seen;
  auto fe = loop_->Watch(p.write_end.get(), 0, [&](uint32_t events) {
    seen.push_back(events);
    if (seen.size() == 2) {
      loop_->Stop();
    }
  });
  ASSERT_TRUE(fe.ok()) << fe.status();
  (*fe)->Activate(EPOLLIN);
  (*fe)->Activate(EPOLLPRI);  // merged into one call
  loop_->Post([&] { ASSERT_TRUE((*fe)->Modify(EPOLLOUT | EPOLLET).ok()); });
  loop_->Run();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], static_cast<uint32_t>(EPOLLIN | EPOLLPRI));
  EXPECT_EQ(seen[1], static_cast<uint32_t>(EPOLLOUT));
}

TEST_F(EventLoopTest, WatchRejectsRegularFile) {
  FILE* f = tmpfile();
  ASSERT_NE(f, nullptr);
  auto fe = loop_->Watch(fileno(f), EPOLLIN, [](uint32_t) {});
  EXPECT_FALSE(fe.ok());
  EXPECT_EQ(fe.status().code(), absl::StatusCode::kPermissionDenied) << fe.status();
  fclose(f);
}

// An owner that ends its own life from its FileEvent callback, as TcpSession does.
struct PipeReader : DeferredDeletable {
  PipeReader(EventLoop& loop, bool* destroyed) : loop(loop), destroyed(destroyed) {}
  ~PipeReader() override { *destroyed = true; }
  EventLoop& loop;
  bool* destroyed;
  base::UniqueFd fd;
  std::unique_ptr<FileEvent> fe;  // after fd: unregistered before the fd closes
};

TEST_F(EventLoopTest, DeferDeleteFromOwnCallback) {
  PipeFds p = MakePipe();
  bool destroyed = false, destroyed_in_callback = false;
  auto reader = std::make_unique<PipeReader>(*loop_, &destroyed);
  PipeReader* raw = reader.get();
  raw->fd = std::move(p.read_end);
  auto fe = loop_->Watch(raw->fd.get(), EPOLLIN, [&](uint32_t) {
    loop_->DeferDelete(std::move(reader));
    destroyed_in_callback = destroyed;
    loop_->Stop();
  });
  ASSERT_TRUE(fe.ok());
  raw->fe = std::move(*fe);
  ASSERT_EQ(write(p.write_end.get(), "x", 1), 1);
  loop_->Run();
  EXPECT_FALSE(destroyed_in_callback);
  EXPECT_TRUE(destroyed);
}

TEST_F(EventLoopTest, CancelInsideOwnCallbackStopsFurtherCallbacks) {
  PipeFds p = MakePipe();
  int calls = 0;
  std::unique_ptr<FileEvent> fe;
  fe = *loop_->Watch(p.read_end.get(), EPOLLIN, [&](uint32_t) {
    ++calls;
    fe->Cancel();  // level-triggered and never read: without Cancel it would fire every iteration
    fe->Activate(EPOLLIN);                                      // ignored once cancelled
    p.read_end.Reset();                                         // the fd may be closed at once
    loop_->Post([&] { loop_->Post([&] { loop_->Stop(); }); });  // two more iterations
  });
  ASSERT_EQ(write(p.write_end.get(), "x", 1), 1);
  loop_->Run();
  EXPECT_EQ(calls, 1);
  fe.reset();  // no EPOLL_CTL_DEL on the closed fd
}

TEST_F(EventLoopTest, FileEventDestroyedByAnotherCallbackInSameBatchIsNotDispatched) {
  PipeFds p1 = MakePipe(), p2 = MakePipe();
  std::unique_ptr<FileEvent> fe[2];
  int calls[2] = {0, 0};
  auto on_ready = [&](int self) {
    return [&, self](uint32_t) {
      ++calls[self];
      fe[1 - self].reset();  // both are ready in one epoll_wait batch; the other must be dropped
      loop_->Post([&] { loop_->Stop(); });
    };
  };
  fe[0] = *loop_->Watch(p1.read_end.get(), EPOLLIN, on_ready(0));
  fe[1] = *loop_->Watch(p2.read_end.get(), EPOLLIN, on_ready(1));
  ASSERT_EQ(write(p1.write_end.get(), "x", 1), 1);
  ASSERT_EQ(write(p2.write_end.get(), "x", 1), 1);
  fe[0]->Activate(EPOLLIN);  // its queued activation must be dropped too
  fe[1]->Activate(EPOLLIN);
  loop_->Run();
  const int dead = fe[0] == nullptr ? 0 : 1;
  ASSERT_NE(fe[1 - dead], nullptr);
  EXPECT_EQ(calls[dead], 0);
  EXPECT_EQ(calls[1 - dead], 2);  // its epoll event and its activation
}

// A manual loop on a fake clock: time moves only with Advance, and RunOnce turns the loop
// without waiting for it.
TEST(ManualEventLoopTest, FakeClockDrivesTimersAndNow) {
  base::FakeClock clock;
  auto loop = EventLoop::Create(clock).value();
  int fired = 0;
  auto t = loop->CreateTimer([&] { ++fired; });
  t->Arm(absl::Seconds(30));
  EXPECT_FALSE(loop->RunOnce(absl::ZeroDuration()));  // not due, and nothing else to do
  clock.Advance(absl::Seconds(29));
  EXPECT_FALSE(loop->RunOnce(absl::ZeroDuration()));
  EXPECT_EQ(fired, 0);
  clock.Advance(absl::Seconds(1));
  EXPECT_TRUE(loop->RunOnce(absl::ZeroDuration()));
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(loop->MonotonicNow(), clock.MonotonicNow());
  EXPECT_EQ(loop->Now(), clock.Now());
}

TEST(ManualEventLoopTest, RunOnceReportsPostedTasksAndDeletions) {
  base::FakeClock clock;
  auto loop = EventLoop::Create(clock).value();
  bool ran = false;
  loop->Post([&] { ran = true; });
  EXPECT_TRUE(loop->RunOnce(absl::ZeroDuration()));
  EXPECT_TRUE(ran);
  EXPECT_TRUE(loop->IsInLoopThread());
  loop->DeferDelete(std::make_unique<DeferredDeletable>());
  EXPECT_TRUE(loop->RunOnce(absl::ZeroDuration()));
  EXPECT_FALSE(loop->RunOnce(absl::ZeroDuration()));
}

// A task that never ran may own handles on the loop: destroying the loop destroys it first.
TEST(ManualEventLoopTest, UnrunTasksAreDestroyedBeforeTheLoopChecksItsHandles) {
  auto loop = EventLoop::Create().value();
  std::shared_ptr<Timer> t = loop->CreateTimer([] {});
  t->Arm(absl::Hours(1));
  loop->Post([t = std::move(t)] {});
  loop.reset();  // no SLUICE_CHECK failure
}

TEST(LoopThreadTest, RunsPostedTasksOnItsNamedThread) {
  auto lt = LoopThread::Create("loop-thread-test-long-name").value();
  std::promise<std::string> name;
  lt->loop().Post([&] {
    char buf[16] = {};
    pthread_getname_np(pthread_self(), buf, sizeof(buf));
    EXPECT_TRUE(lt->loop().IsInLoopThread());
    name.set_value(buf);
  });
  EXPECT_EQ(name.get_future().get(), "loop-thread-tes");
  EXPECT_FALSE(lt->loop().IsInLoopThread());
}

// The loop keeps the injected clock's time; after Stop (once, however often called) the owner
// tears down what is registered with it on its own thread, as Worker does.
TEST(LoopThreadTest, TakesItsClockAndStopsOnceLeavingTheLoop) {
  base::FakeClock clock;
  auto lt = LoopThread::Create("clock-test", clock).value();
  std::promise<base::MonoTime> seen;
  lt->loop().Post([&] { seen.set_value(lt->loop().MonotonicNow()); });
  EXPECT_EQ(seen.get_future().get(), clock.MonotonicNow());
  std::unique_ptr<Timer> timer;
  std::promise<void> armed;
  lt->loop().Post([&] {
    timer = lt->loop().CreateTimer([] {});
    timer->Arm(absl::Hours(1));
    armed.set_value();
  });
  armed.get_future().wait();
  lt->Stop();
  lt->Stop();
  EXPECT_EQ(lt->loop().armed_timers(), 1u);
  timer.reset();
  EXPECT_EQ(lt->loop().armed_timers(), 0u);
}

}  // namespace
}  // namespace sluice::event
