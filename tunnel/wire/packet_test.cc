// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/packet.h"

#include <string>

#include "gtest/gtest.h"

namespace sluice::tunnel::wire {
namespace {

TEST(PacketTest, BuildersSetTypeAndPayload) {
  Packet d = MakeDialRequest("127.0.0.1:80", 7);
  EXPECT_EQ(d.type(), DIAL_REQ);
  EXPECT_EQ(d.dialrequest().protocol(), "tcp");
  EXPECT_EQ(d.dialrequest().random(), 7);
  EXPECT_TRUE(Validate(d).ok());
  EXPECT_TRUE(Validate(MakeDialResponse(7, 1, "")).ok());
  EXPECT_TRUE(Validate(MakeData(3, "x")).ok());
  EXPECT_TRUE(Validate(MakeCloseRequest(3)).ok());
  EXPECT_TRUE(Validate(MakeCloseResponse(3, "")).ok());
  EXPECT_TRUE(Validate(MakeCloseDial(7)).ok());
  EXPECT_TRUE(Validate(MakeDrain()).ok());
}

TEST(PacketTest, WireFieldNumbersMatchUpstream) {
  // type=DATA(4) -> field 1 varint 4; data (field 4, len) { connectID=5 (field 1), data "hi"
  // (field 3) }.
  Packet p = MakeData(5, "hi");
  std::string bytes;
  ASSERT_TRUE(p.SerializeToString(&bytes));
  EXPECT_EQ(bytes, std::string("\x08\x04\x22\x06\x08\x05\x1a\x02hi", 10));
}

TEST(PacketTest, RejectsMismatchedPayloadAndBadIds) {
  Packet p;
  p.set_type(DATA);
  EXPECT_FALSE(Validate(p).ok());
  EXPECT_FALSE(Validate(MakeData(0, "x")).ok());
  Packet d = MakeDialRequest("a:1", -1);
  EXPECT_FALSE(Validate(d).ok());
  Packet unknown;
  unknown.set_type(static_cast<PacketType>(42));
  EXPECT_EQ(Validate(unknown).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(TypeName(42), "UNKNOWN(42)");
  EXPECT_EQ(TypeName(DIAL_CLS), "DIAL_CLS");
}

TEST(PacketTest, GrpcCodeNamesAreGos) {
  EXPECT_EQ(GrpcCodeName(1), "Canceled");
  EXPECT_EQ(GrpcCodeName(14), "Unavailable");
  EXPECT_EQ(GrpcCodeName(16), "Unauthenticated");
  EXPECT_EQ(GrpcCodeName(17), "Code(17)");
}

TEST(PacketTest, RandomUuidIsVersion4) {
  const std::string a = RandomUuid();
  ASSERT_EQ(a.size(), 36u) << a;
  for (size_t i : {8, 13, 18, 23}) {
    EXPECT_EQ(a[i], '-') << a;
  }
  EXPECT_EQ(a[14], '4') << a;
  EXPECT_NE(std::string("89ab").find(a[19]), std::string::npos) << a;
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef-"), std::string::npos) << a;
  EXPECT_NE(a, RandomUuid());
}

TEST(SendWindowTest, PausesPastTheWindowAndResumesAtHalf) {
  SendWindow w;
  EXPECT_FALSE(w.Charge(kSendWindow));  // exactly full is still open
  EXPECT_TRUE(w.open());
  EXPECT_TRUE(w.Charge(1));
  EXPECT_FALSE(w.open());
  EXPECT_FALSE(w.Credit(kSendWindow / 2));  // open again, but not yet down to half
  EXPECT_TRUE(w.open());
  EXPECT_TRUE(w.Credit(1));
}

TEST(SendWindowTest, PeerWindowPausesAtZeroCreditAndResumesOnAGrant) {
  SendWindow w;
  w.SetPeerWindow(100);
  EXPECT_TRUE(w.windowed());
  EXPECT_FALSE(w.Charge(99));
  EXPECT_TRUE(w.Charge(1));     // no credit left, however little is in flight
  EXPECT_FALSE(w.Credit(100));  // gRPC wrote it all, but the peer has granted nothing
  EXPECT_FALSE(w.open());
  EXPECT_TRUE(w.Grant(10));
  EXPECT_TRUE(w.open());
  EXPECT_TRUE(w.Charge(50));  // one message may overshoot the credit
  EXPECT_EQ(w.credit(), -40);
  EXPECT_FALSE(w.Grant(40));
  EXPECT_TRUE(w.Grant(1));
}

TEST(CreditReturnTest, GrantsAQuarterWindowAtATimeOrWhatIsLeftOnceDrained) {
  CreditReturn r(1000);
  EXPECT_EQ(r.Consumed(100, false), 0);
  EXPECT_EQ(r.Consumed(149, false), 0);
  EXPECT_EQ(r.Consumed(1, false), 250);
  EXPECT_EQ(r.Consumed(7, false), 0);
  EXPECT_EQ(r.Consumed(3, true), 10);  // drained: nothing is left owed
  EXPECT_EQ(r.Consumed(0, true), 0);
}

TEST(WindowTest, HeaderValuesOutsideTheBoundsMeanNoExtension) {
  EXPECT_EQ(ParseWindow("4194304"), 4194304);
  EXPECT_EQ(ParseWindow(""), 0);
  EXPECT_EQ(ParseWindow("abc"), 0);
  EXPECT_EQ(ParseWindow("-1"), 0);
  EXPECT_EQ(ParseWindow("1"), 0);  // below one read chunk
  EXPECT_EQ(ParseWindow(std::to_string(kMaxWindow + 1)), 0);
  EXPECT_EQ(WindowFor(16 << 20), 4 << 20);
  EXPECT_EQ(WindowFor(1024), kMinWindow);
}

TEST(PacketTest, CreditIsValidatedLikeData) {
  EXPECT_TRUE(Validate(MakeCredit(3, 100)).ok());
  EXPECT_FALSE(Validate(MakeCredit(0, 100)).ok());
  EXPECT_FALSE(Validate(MakeCredit(3, 0)).ok());
  Packet bare;
  bare.set_type(SLUICE_CREDIT);
  EXPECT_FALSE(Validate(bare).ok());
  EXPECT_EQ(TypeName(SLUICE_CREDIT), "SLUICE_CREDIT");
}

}  // namespace
}  // namespace sluice::tunnel::wire
