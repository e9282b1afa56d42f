// SPDX-License-Identifier: Apache-2.0
// The startup self-test of --external-datapath=auto (SelfTest in ext_nat.h): the programs run
// on crafted packets with BPF_PROG_TEST_RUN, so it needs only what the data path needs
// (CAP_BPF + CAP_NET_ADMIN): no device, no namespace, nothing the node's traffic could see.
#include <linux/if_ether.h>
#include <netinet/in.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "lib/base/status.h"
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "agent/dataplane/extnat/ext_nat.h"
#include "bpf/ext_nat.skel.h"

namespace sluice::extnat {
namespace {

constexpr int kTcActOk = 0;        // TC_ACT_OK (linux/pkt_cls.h)
constexpr int kTcActRedirect = 7;  // TC_ACT_REDIRECT
constexpr uint8_t kSyn = 0x02, kAck = 0x10;

net::SocketAddress At(const char* text) { return *net::SocketAddress::Parse(text); }

// One frontend and its backend, and the client that reaches it (TEST-NET addresses: the
// packets exist only in BPF_PROG_TEST_RUN).
struct Probe {
  const char* name;
  uint8_t proto;
  net::SocketAddress client, frontend, backend;
};

std::vector<Probe> Probes() {
  return {
      {"TCP IPv4", IPPROTO_TCP, At("192.0.2.1:40000"), At("192.0.2.2:80"), At("192.0.2.3:8080")},
      {"UDP IPv4", IPPROTO_UDP, At("192.0.2.1:40000"), At("192.0.2.2:53"), At("192.0.2.3:5353")},
      {"TCP IPv6", IPPROTO_TCP, At("[2001:db8::1]:40000"), At("[2001:db8::2]:80"),
       At("[2001:db8::3]:8080")},
      {"UDP IPv6", IPPROTO_UDP, At("[2001:db8::1]:40000"), At("[2001:db8::2]:53"),
       At("[2001:db8::3]:5353")},
  };
}

uint32_t Sum(const uint8_t* p, size_t n, uint32_t sum = 0) {
  for (size_t i = 0; i + 1 < n; i += 2) {
    sum += static_cast<uint32_t>(p[i] << 8 | p[i + 1]);
  }
  if (n % 2 != 0) {
    sum += static_cast<uint32_t>(p[n - 1] << 8);
  }
  return sum;
}
uint16_t Fold(uint32_t sum) {
  while (sum >> 16 != 0) {
    sum = (sum & 0xffff) + (sum >> 16);
  }
  return static_cast<uint16_t>(sum);
}
void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }

// Where a packet's parts are (Ethernet, then IPv4 without options or IPv6 without extension
// headers, then TCP without options or UDP).
struct Layout {
  bool v6;
  size_t l4;
  size_t addr_len() const { return v6 ? 16 : 4; }
  size_t saddr() const { return ETH_HLEN + (v6 ? 8 : 12); }
  size_t daddr() const { return saddr() + addr_len(); }
};

// The sum of the L4 pseudo header of `pkt`.
uint32_t PseudoSum(const std::vector<uint8_t>& pkt, const Layout& l, uint8_t proto) {
  uint32_t sum = Sum(&pkt[l.saddr()], 2 * l.addr_len());
  return sum + proto + static_cast<uint32_t>(pkt.size() - l.l4);
}

std::vector<uint8_t> Build(uint8_t proto, const net::SocketAddress& from,
                           const net::SocketAddress& to, uint8_t tcp_flags) {
  const bool v6 = !from.ip().is_v4();
  const Layout l{v6, ETH_HLEN + (v6 ? 40u : 20u)};
  const size_t l4_len = proto == IPPROTO_TCP ? 20 : 8 + 16;  // UDP: 16 bytes of payload
  std::vector<uint8_t> pkt(l.l4 + l4_len);
  uint8_t* eth = pkt.data();
  std::memcpy(eth, "\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01", 12);
  Put16(eth + 12, v6 ? ETH_P_IPV6 : ETH_P_IP);
  uint8_t* ip = eth + ETH_HLEN;
  if (v6) {
    ip[0] = 0x60;
    Put16(ip + 4, static_cast<uint16_t>(l4_len));
    ip[6] = proto;
    ip[7] = 64;
  } else {
    ip[0] = 0x45;
    Put16(ip + 2, static_cast<uint16_t>(pkt.size() - ETH_HLEN));
    Put16(ip + 6, 0x4000);  // DF
    ip[8] = 64;
    ip[9] = proto;
  }
  std::memcpy(&pkt[l.saddr()], from.ip().bytes(), l.addr_len());
  std::memcpy(&pkt[l.daddr()], to.ip().bytes(), l.addr_len());
  if (!v6) {
    Put16(ip + 10, static_cast<uint16_t>(~Fold(Sum(ip, 20))));
  }
  uint8_t* l4 = &pkt[l.l4];
  Put16(l4, from.port());
  Put16(l4 + 2, to.port());
  if (proto == IPPROTO_TCP) {
    Put16(l4 + 4, 0x5a5a);  // sequence number
    l4[12] = 5 << 4;        // data offset: no options
    l4[13] = tcp_flags;
    Put16(l4 + 14, 65535);  // window
  } else {
    Put16(l4 + 4, static_cast<uint16_t>(l4_len));
    std::memcpy(l4 + 8, "sluice self-test", 16);
  }
  const size_t csum = l.l4 + (proto == IPPROTO_TCP ? 16 : 6);
  Put16(&pkt[csum], static_cast<uint16_t>(~Fold(Sum(l4, l4_len, PseudoSum(pkt, l, proto)))));
  return pkt;
}

// Runs `prog` on `in`; the packet it leaves.
absl::StatusOr<std::vector<uint8_t>> Run(int prog, const std::vector<uint8_t>& in,
                                         const std::string& what) {
  std::vector<uint8_t> out(in.size() + 256);
  LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = in.data(), .data_out = out.data(),
              .data_size_in = static_cast<uint32_t>(in.size()),
              .data_size_out = static_cast<uint32_t>(out.size()), .repeat = 1);
  if (int err = bpf_prog_test_run_opts(prog, &opts); err != 0) {
    return base::ErrnoStatus(-err, absl::StrCat("BPF_PROG_TEST_RUN (", what, ")"));
  }
  // TC_ACT_REDIRECT: forwarded by the FIB (where this namespace has a route to the backend).
  if (opts.retval != kTcActOk && opts.retval != kTcActRedirect) {
    return absl::InternalError(
        absl::StrCat(what, ": verdict ", opts.retval, ", not TC_ACT_OK or TC_ACT_REDIRECT"));
  }
  out.resize(opts.data_size_out);
  return out;
}

// That `pkt` goes from `from` to `to` with right IPv4 and L4 checksums.
absl::Status Expect(const std::vector<uint8_t>& pkt, const Probe& p, const net::SocketAddress& from,
                    const net::SocketAddress& to, const std::string& what) {
  const bool v6 = !from.ip().is_v4();
  const Layout l{v6, ETH_HLEN + (v6 ? 40u : 20u)};
  if (pkt.size() < l.l4 + (p.proto == IPPROTO_TCP ? 20 : 8)) {
    return absl::InternalError(absl::StrCat(what, ": ", pkt.size(), " bytes left"));
  }
  auto addr = [&](size_t at, size_t port_at) {
    auto ip = net::IpAddress::FromBytes(v6 ? AF_INET6 : AF_INET, &pkt[at], l.addr_len());
    return ip ? net::SocketAddress(*ip, Get16(&pkt[port_at])).ToString() : "?";
  };
  const std::string src = addr(l.saddr(), l.l4), dst = addr(l.daddr(), l.l4 + 2);
  if (src != from.ToString() || dst != to.ToString()) {
    return absl::InternalError(absl::StrCat(what, ": left as ", src, " -> ", dst, ", not ",
                                            from.ToString(), " -> ", to.ToString()));
  }
  if (!v6 && Fold(Sum(&pkt[ETH_HLEN], 20)) != 0xffff) {
    return absl::InternalError(absl::StrCat(what, ": wrong IPv4 header checksum"));
  }
  if (Fold(Sum(&pkt[l.l4], pkt.size() - l.l4, PseudoSum(pkt, l, p.proto))) != 0xffff) {
    return absl::InternalError(
        absl::StrCat(what, ": wrong ", p.proto == IPPROTO_TCP ? "TCP" : "UDP", " checksum"));
  }
  return absl::OkStatus();
}

}  // namespace

std::map<std::string, Service> SelfTestServices() {
  std::map<std::string, Service> services;
  for (const Probe& p : Probes()) {
    services[absl::StrCat("self-test/", p.name)] = {
        .frontends = {{p.frontend, p.proto == IPPROTO_UDP}}, .backends = {p.backend}};
  }
  return services;
}

absl::Status SelfTestPackets(const NatObject& object) {
  const int in = bpf_program__fd(object.skel().progs.sluice_nat_in);
  const int out = bpf_program__fd(object.skel().progs.sluice_nat_out);
  for (const Probe& p : Probes()) {
    const std::string forward =
        absl::StrCat(p.name, ": the client's ", p.proto == IPPROTO_TCP ? "SYN" : "datagram", " to ",
                     p.frontend.ToString(), " at ingress");
    ASSIGN_OR_RETURN(std::vector<uint8_t> translated,
                     Run(in, Build(p.proto, p.client, p.frontend, kSyn), forward));
    RETURN_IF_ERROR(Expect(translated, p, p.client, p.backend, forward));
    const std::string reply =
        absl::StrCat(p.name, ": the backend's answer from ", p.backend.ToString(), " at egress");
    ASSIGN_OR_RETURN(std::vector<uint8_t> answer,
                     Run(out, Build(p.proto, p.backend, p.client, kSyn | kAck), reply));
    RETURN_IF_ERROR(Expect(answer, p, p.frontend, p.client, reply));
  }
  return absl::OkStatus();
}

absl::Status SelfTest() {
  // Unpinned, small maps: quick to allocate, gone with the object.
  LoadOptions options;
  options.max_frontends = options.max_slots = options.max_affinity = 16;
  options.max_flows = 64;
  absl::Status result = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<ExtNat> nat, ExtNat::Create(options));
    RETURN_IF_ERROR(nat->ApplyAll(SelfTestServices()));
    return SelfTestPackets(*nat->object());
  }();
  if (!result.ok()) {
    return absl::Status(result.code(), absl::StrCat("external NAT self-test: ", result.message()));
  }
  return absl::OkStatus();
}

}  // namespace sluice::extnat
