// SPDX-License-Identifier: Apache-2.0
#include "tunnel/wire/packet.h"

#include <malloc.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <random>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "lib/base/strings.h"

namespace sluice::tunnel::wire {

void TuneMalloc() {
  mallopt(M_MMAP_THRESHOLD, 4 << 20);  // fixed: DATA chunks never take the mmap path
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  mallopt(M_TOP_PAD, 16 << 20);
}

Packet MakeDialRequest(std::string_view address, int64_t random) {
  Packet p;
  p.set_type(DIAL_REQ);
  p.mutable_dialrequest()->set_protocol("tcp");
  p.mutable_dialrequest()->set_address(std::string(address));
  p.mutable_dialrequest()->set_random(random);
  return p;
}

Packet MakeDialResponse(int64_t random, int64_t connect_id, std::string_view error) {
  Packet p;
  p.set_type(DIAL_RSP);
  p.mutable_dialresponse()->set_random(random);
  p.mutable_dialresponse()->set_connectid(connect_id);
  p.mutable_dialresponse()->set_error(std::string(error));
  return p;
}

Packet MakeData(int64_t connect_id, std::string bytes) {
  Packet p;
  p.set_type(DATA);
  p.mutable_data()->set_connectid(connect_id);
  p.mutable_data()->set_data(std::move(bytes));
  return p;
}

Packet MakeCloseRequest(int64_t connect_id) {
  Packet p;
  p.set_type(CLOSE_REQ);
  p.mutable_closerequest()->set_connectid(connect_id);
  return p;
}

Packet MakeCloseResponse(int64_t connect_id, std::string_view error) {
  Packet p;
  p.set_type(CLOSE_RSP);
  p.mutable_closeresponse()->set_connectid(connect_id);
  p.mutable_closeresponse()->set_error(std::string(error));
  return p;
}

Packet MakeCloseDial(int64_t random) {
  Packet p;
  p.set_type(DIAL_CLS);
  p.mutable_closedial()->set_random(random);
  return p;
}

Packet MakeDrain() {
  Packet p;
  p.set_type(DRAIN);
  p.mutable_drain();
  return p;
}

Packet MakeCredit(int64_t connect_id, int64_t bytes) {
  Packet p;
  p.set_type(SLUICE_CREDIT);
  p.mutable_credit()->set_connectid(connect_id);
  p.mutable_credit()->set_bytes(bytes);
  return p;
}

int64_t WindowFor(size_t max_connection_buffer) {
  return std::clamp(static_cast<int64_t>(max_connection_buffer / 4), kMinWindow, kMaxWindow);
}

int64_t ParseWindow(std::string_view value) {
  int64_t w = 0;
  if (!absl::SimpleAtoi(base::Absl(value), &w) || w < kMinWindow || w > kMaxWindow) {
    return 0;
  }
  return w;
}

std::string TypeName(int type) {
  if (PacketType_IsValid(type)) {
    return PacketType_Name(static_cast<PacketType>(type));
  }
  return absl::StrCat("UNKNOWN(", type, ")");
}

std::string TypeLabel(int type) {
  return PacketType_IsValid(type) ? PacketType_Name(static_cast<PacketType>(type))
                                  : absl::StrCat(type);
}

absl::Status Validate(const Packet& p) {
  auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("packet ", TypeName(p.type()), ": ", base::Absl(what)));
  };
  switch (p.type()) {
    case DIAL_REQ:
      if (!p.has_dialrequest()) {
        return bad("missing dialRequest");
      }
      if (p.dialrequest().random() < 0) {
        return bad("negative random");
      }
      return absl::OkStatus();
    case DIAL_RSP:
      return p.has_dialresponse() ? absl::OkStatus() : bad("missing dialResponse");
    case DATA:
      if (!p.has_data()) {
        return bad("missing data");
      }
      return p.data().connectid() > 0 ? absl::OkStatus() : bad("connectID must be positive");
    case CLOSE_REQ:
      return p.has_closerequest() ? absl::OkStatus() : bad("missing closeRequest");
    case CLOSE_RSP:
      return p.has_closeresponse() ? absl::OkStatus() : bad("missing closeResponse");
    case DIAL_CLS:
      return p.has_closedial() ? absl::OkStatus() : bad("missing closeDial");
    case DRAIN:
      return absl::OkStatus();
    case SLUICE_CREDIT:
      if (!p.has_credit()) {
        return bad("missing credit");
      }
      if (p.credit().connectid() <= 0 || p.credit().bytes() <= 0) {
        return bad("connectID and bytes must be positive");
      }
      return absl::OkStatus();
    default:
      return absl::UnimplementedError(absl::StrCat("unknown packet type ", p.type()));
  }
}

size_t PacketBytes(const Packet& p) { return 64 + (p.type() == DATA ? p.data().data().size() : 0); }

std::string RandomUuid() {
  std::random_device rd;
  uint8_t b[16];
  for (size_t i = 0; i < sizeof(b); i += 4) {
    const uint32_t r = rd();
    std::memcpy(b + i, &r, 4);
  }
  b[6] = (b[6] & 0x0f) | 0x40;  // version 4
  b[8] = (b[8] & 0x3f) | 0x80;  // RFC 4122 variant
  std::string out;
  for (size_t i = 0; i < sizeof(b); ++i) {
    absl::StrAppend(&out, (i == 4 || i == 6 || i == 8 || i == 10) ? "-" : "",
                    absl::Hex(b[i], absl::kZeroPad2));
  }
  return out;
}

base::Family<base::Counter>& AddStreamPackets(base::Registry& r, const std::string& prefix) {
  return r.AddCounter(prefix + "stream_packets_total",
                      "Count of packets processed, by segment and packet type (example: "
                      "from_client, DIAL_REQ)",
                      {"segment", "packet_type"});
}

base::Family<base::Counter>& AddStreamErrors(base::Registry& r, const std::string& prefix) {
  return r.AddCounter(prefix + "stream_errors_total",
                      "Count of gRPC stream errors, by segment, grpc Code, packet type. "
                      "(example: from_agent, Code.Unavailable, DIAL_RSP)",
                      {"segment", "code", "packet_type"});
}

std::string GrpcCodeName(int code) {
  static constexpr const char* kNames[] = {
      "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
      "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
      "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
      "DataLoss", "Unauthenticated"};
  if (code >= 0 && code < static_cast<int>(std::size(kNames))) {
    return kNames[code];
  }
  return "Code(" + std::to_string(code) + ")";
}

}  // namespace sluice::tunnel::wire
