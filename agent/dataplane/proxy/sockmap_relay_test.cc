// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/sockmap_relay.h"

#include <poll.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"

#include "agent/dataplane/fastpath/fake_kernel_link.h"
#include "agent/dataplane/proxy/test_sockets.h"

// Every transition of SockmapRelay's state machine, unprivileged: the kernel is a
// FakeKernelLink the test scripts, the pump a real SplicePump on loopback sockets (it forwards
// what the "verdict" passed).
namespace sluice::proxy {
namespace {

using fastpath::Side;
using State = SockmapRelay::State;
using Next = SockmapRelay::Next;

class SockmapRelayTest : public ::testing::Test {
 protected:
  fastpath::Progress& progress() { return link_.direction(Side::kClient).progress; }

  void Attach() {
    ASSERT_TRUE(relay_->Attach());
    ASSERT_EQ(relay_->state(), State::kAttached);
  }
  // Above the high mark at a signal: the direction passes until its psock queue is empty.
  void Pause() {
    Attach();
    progress().consumed = 2500;
    progress().written = 1000;
    ASSERT_EQ(relay_->OnSignal(), Next::kPoll);
    ASSERT_EQ(relay_->state(), State::kPaused);
  }
  void PauseAndForward() {
    Pause();
    progress().written = progress().consumed;
    ASSERT_EQ(relay_->Poll(), Next::kRunPump);
    ASSERT_EQ(relay_->state(), State::kForwarding);
  }
  // The client sends `n` bytes that the verdict passed; the pump forwards them as its owner
  // would after kRunPump, until it read the socket empty.
  void Forward(size_t n) {
    const uint64_t target = pump_.bytes() + n;
    progress().passed += n;
    progress().written += n;  // the destination's stream grows by what the pump wrote
    ASSERT_TRUE(testing::SendAll(client_.far.get(), std::string(n, 'p')));
    while (pump_.bytes() < target || !pump_.src_drained()) {
      pollfd p{.fd = client_.near.get(), .events = POLLIN, .revents = 0};
      ASSERT_EQ(poll(&p, 1, 20000), 1);
      pump_.OnSrcReadable();
      pump_.OnDstWritable();
      ASSERT_EQ(pump_.Pump(), SplicePump::Result::kWaiting);
    }
  }

  PipePool pool_{PipePool::Options{}};
  fastpath::FakeKernelLink link_;
  base::Gauge paused_;
  base::Counter pauses_;
  SockmapFlow flow_{.marks = {.high = 1000, .low = 100}, .paused = paused_, .pauses = pauses_};
  testing::TcpPair client_ = testing::MakeTcpPair(/*dialed=*/false);
  testing::TcpPair backend_ = testing::MakeTcpPair(/*dialed=*/true);
  SplicePump pump_{client_.near.get(), backend_.near.get(), pool_, /*use_splice=*/true};
  std::unique_ptr<SockmapRelay> relay_ =
      std::make_unique<SockmapRelay>(link_, Side::kClient, pump_, flow_);
};

TEST_F(SockmapRelayTest, PendingAttachesAndTheKernelHasTheDirection) {
  EXPECT_EQ(relay_->state(), State::kPending);
  EXPECT_FALSE(relay_->kernel());
  Attach();
  EXPECT_TRUE(relay_->kernel());
  EXPECT_TRUE(link_.direction(Side::kClient).attached);
  EXPECT_FALSE(link_.direction(Side::kBackend).attached);
  EXPECT_TRUE(relay_->Attach());  // a second call only reports
  EXPECT_EQ(link_.calls(), std::vector<std::string>{"Attach(client)"});
}

TEST_F(SockmapRelayTest, KernelRefusingAttachLeavesTheDirectionToThePump) {
  link_.FailNext("Attach", absl::UnimplementedError("sluice_attach: Operation not supported"));
  EXPECT_FALSE(relay_->Attach());
  EXPECT_EQ(relay_->state(), State::kUser);
  EXPECT_FALSE(relay_->kernel());
  EXPECT_EQ(relay_->OnSrcEof(), Next::kNothing);
}

TEST_F(SockmapRelayTest, SignalOnlyCountsWhileAttached) {
  EXPECT_EQ(relay_->OnSignal(), Next::kNothing);
  EXPECT_TRUE(link_.calls().empty());
}

TEST_F(SockmapRelayTest, SignalBelowTheHighMarkRearmsIt) {
  Attach();
  progress().consumed = 1500;
  progress().written = 1200;
  EXPECT_EQ(relay_->OnSignal(), Next::kNothing);
  EXPECT_EQ(relay_->state(), State::kAttached);
  EXPECT_EQ(link_.direction(Side::kClient).mark, 1200u + 1000u);
  EXPECT_EQ(relay_->bytes(), 1500u);
}

TEST_F(SockmapRelayTest, SignalAboveTheHighMarkPausesUntilTheQueueIsEmpty) {
  Pause();
  EXPECT_TRUE(relay_->kernel());
  EXPECT_TRUE(link_.direction(Side::kClient).pass);
  EXPECT_EQ(paused_.Value(), 1);
  EXPECT_EQ(pauses_.Value(), 1);
  // Passed bytes are visible to recv(), not to splice().
  EXPECT_EQ(pump_.path(), SplicePump::Path::kCopy);
  progress().written = 2000;
  EXPECT_EQ(relay_->Poll(), Next::kPoll);  // 500 bytes still in the psock queue
  EXPECT_EQ(relay_->state(), State::kPaused);
  progress().written = 2500;
  EXPECT_EQ(relay_->Poll(), Next::kRunPump);
  EXPECT_EQ(relay_->state(), State::kForwarding);
  EXPECT_FALSE(relay_->kernel());
  EXPECT_EQ(link_.calls().back(), "Kick(client)");  // the verdict passes what waited meanwhile
}

TEST_F(SockmapRelayTest, IdlePumpResumesTheKernelAndPollConfirmsIt) {
  PauseAndForward();
  Forward(5);
  EXPECT_EQ(relay_->Poll(), Next::kPoll);  // the pump is idle: resume
  EXPECT_EQ(relay_->state(), State::kResuming);
  EXPECT_FALSE(link_.direction(Side::kClient).pass);
  EXPECT_EQ(link_.direction(Side::kClient).resume_at, 5u);
  EXPECT_EQ(link_.direction(Side::kClient).mark, 2500u + 1000u);
  EXPECT_TRUE(relay_->kernel());
  EXPECT_EQ(relay_->Poll(), Next::kStopPump);  // nothing passed since: redirecting again
  EXPECT_EQ(relay_->state(), State::kAttached);
  EXPECT_EQ(paused_.Value(), 0);
  EXPECT_EQ(pauses_.Value(), 1);
}

TEST_F(SockmapRelayTest, ByteTheProgramPassedWhileResumingIsForwardedFirst) {
  PauseAndForward();
  Forward(5);
  ASSERT_EQ(relay_->OnPumpIdle(), Next::kPoll);
  ASSERT_EQ(relay_->state(), State::kResuming);
  progress().passed += 1;  // reached the verdict before the resume took effect
  EXPECT_EQ(relay_->Poll(), Next::kRunPump);
  EXPECT_EQ(relay_->state(), State::kForwarding);
  progress().passed -= 1;
  Forward(1);
  EXPECT_EQ(relay_->Poll(), Next::kPoll);
  EXPECT_EQ(relay_->state(), State::kResuming);
  EXPECT_EQ(link_.direction(Side::kClient).resume_at, 6u);
  EXPECT_EQ(relay_->Poll(), Next::kStopPump);
  EXPECT_EQ(paused_.Value(), 0);
}

TEST_F(SockmapRelayTest, ForwardingWaitsForPassedBytesStillOnTheirWay) {
  PauseAndForward();
  Forward(5);
  progress().passed += 3;  // counted by the program, not read yet
  EXPECT_EQ(relay_->OnPumpIdle(), Next::kNothing);
  EXPECT_EQ(relay_->state(), State::kForwarding);
}

TEST_F(SockmapRelayTest, ForwardingWaitsForTheDestinationBelowTheLowMark) {
  PauseAndForward();
  Forward(5);
  progress().dst_queued = 101;
  EXPECT_EQ(relay_->Poll(), Next::kPoll);
  EXPECT_EQ(relay_->state(), State::kForwarding);
  progress().dst_queued = 100;
  EXPECT_EQ(relay_->Poll(), Next::kPoll);
  EXPECT_EQ(relay_->state(), State::kResuming);
}

TEST_F(SockmapRelayTest, PumpAheadOfThePassedCountKeepsTheDirectionForGood) {
  PauseAndForward();
  Forward(5);
  progress().passed -= 1;
  EXPECT_EQ(relay_->OnPumpIdle(), Next::kNothing);
  EXPECT_EQ(relay_->state(), State::kUser);
  EXPECT_EQ(paused_.Value(), 0);
}

TEST_F(SockmapRelayTest, SourceEofDrainsTheKernelThenHandsTheRestToThePump) {
  Attach();
  progress().consumed = 3000;
  progress().written = 2000;
  EXPECT_EQ(relay_->OnSrcEof(), Next::kPoll);
  EXPECT_EQ(relay_->state(), State::kDraining);
  EXPECT_TRUE(relay_->kernel());
  EXPECT_EQ(relay_->Poll(), Next::kPoll);
  progress().written = 3000;
  EXPECT_EQ(relay_->Poll(), Next::kRunPump);
  EXPECT_EQ(relay_->state(), State::kUser);
  EXPECT_FALSE(relay_->kernel());
  EXPECT_EQ(pump_.path(), SplicePump::Path::kCopy);
  EXPECT_EQ(relay_->Poll(), Next::kNothing);
}

TEST_F(SockmapRelayTest, SourceEofWhilePausedEndsThePause) {
  Pause();
  EXPECT_EQ(relay_->OnSrcEof(), Next::kPoll);
  EXPECT_EQ(relay_->state(), State::kDraining);
  EXPECT_EQ(paused_.Value(), 0);
}

TEST_F(SockmapRelayTest, SourceEofWhileForwardingHandsOverAtOnce) {
  PauseAndForward();
  EXPECT_EQ(relay_->OnSrcEof(), Next::kRunPump);
  EXPECT_EQ(relay_->state(), State::kUser);
  EXPECT_EQ(paused_.Value(), 0);
}

TEST_F(SockmapRelayTest, SourceEofBeforeAttachLeavesThePumpTheDirection) {
  EXPECT_EQ(relay_->OnSrcEof(), Next::kNothing);
  EXPECT_EQ(relay_->state(), State::kUser);
  EXPECT_FALSE(relay_->Attach());
  EXPECT_TRUE(link_.calls().empty());
}

TEST_F(SockmapRelayTest, FailedMeasurementResetsTheConnection) {
  Attach();
  link_.FailNext("Measure", absl::NotFoundError("lookup sluice_count"));
  EXPECT_EQ(relay_->OnSignal(), Next::kFailed);
}

TEST_F(SockmapRelayTest, FailedMeasurementWhileDrainingResetsTheConnection) {
  Attach();
  progress().consumed = 10;
  ASSERT_EQ(relay_->OnSrcEof(), Next::kPoll);
  link_.FailNext("Measure", absl::DataLossError("repeated bytes not cut off"));
  EXPECT_EQ(relay_->Poll(), Next::kFailed);
}

TEST_F(SockmapRelayTest, FailedPassResetsTheConnection) {
  Attach();
  progress().consumed = 2500;
  link_.FailNext("Pass", absl::NotFoundError("update sluice_limit"));
  EXPECT_EQ(relay_->OnSignal(), Next::kFailed);
}

TEST_F(SockmapRelayTest, ProgressedReportsKernelMovementOnce) {
  EXPECT_FALSE(relay_->Progressed());  // pending: nothing to measure
  Attach();
  progress().consumed = 10;
  EXPECT_TRUE(relay_->Progressed());
  EXPECT_FALSE(relay_->Progressed());
  progress().written = 10;
  EXPECT_TRUE(relay_->Progressed());
  EXPECT_EQ(relay_->written(), 10u);
}

TEST_F(SockmapRelayTest, DestroyingAPausedRelayReleasesTheGauge) {
  Pause();
  relay_.reset();
  EXPECT_EQ(paused_.Value(), 0);
}

}  // namespace
}  // namespace sluice::proxy
