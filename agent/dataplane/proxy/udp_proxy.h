// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <memory>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "lib/base/metrics.h"
#include "lib/base/unique_fd.h"
#include "lib/event/event_loop.h"
#include "lib/net/address.h"

#include "agent/dataplane/proxy/data_path_metrics.h"
#include "agent/dataplane/proxy/load_balancer.h"
#include "agent/dataplane/proxy/route_table.h"
#include "agent/dataplane/proxy/udp_flow_table.h"
#include "agent/dataplane/proxy/udp_send.h"

namespace sluice::proxy {

struct UdpOptions {
  // A flow with no datagram in either direction for this long is closed. conntrack's UDP
  // timeouts are 30 s / 120 s; the userspace kube-proxy's 250 ms broke slow request/reply
  // protocols (see the semantics note).
  absl::Duration idle_timeout = absl::Seconds(30);
  // Per worker, over all of its listeners: each flow holds a socket and an ephemeral port. A
  // full table closes its least recently used flow for a new one (UdpFlowTable).
  size_t max_flows = 16384;
  // Per client IP per worker: a client at the cap gets no new flow (its datagrams from new
  // ports are dropped) until one of its flows closes.
  size_t max_flows_per_source = 256;
  // UDP_SEGMENT for runs of equal-size datagrams of one flow, where the kernel has it.
  bool gso = true;
};

// Scratch space for one recvmmsg/sendmmsg batch. A worker's UDP listeners and flows run on one
// thread and never keep a datagram across callbacks, so the worker owns one arena for all of
// them: kBatch x 64 KiB = 2 MiB of address space per worker, allocated untouched (pages become
// resident only when a datagram of that size arrives). Thread: owning worker loop.
struct DatagramArena {
  // recvmmsg batch: amortises one syscall and one epoll wake-up over up to 32 datagrams
  // without letting one busy socket delay the others for long.
  static constexpr int kBatch = UdpSender::kMaxDatagrams;
  // Bounds every non-jumbogram UDP payload (IPv4: 65507 bytes, IPv6: 65527).
  static constexpr size_t kMaxDatagram = 65535;
  // IP_PKTINFO or IPV6_PKTINFO, the only control message we ask for.
  static constexpr size_t kControlSize = 64;

  DatagramArena() : data(new char[kBatch * kMaxDatagram]) {}  // not value-initialised: untouched
  char* Buffer(int i) { return data.get() + static_cast<size_t>(i) * kMaxDatagram; }

  std::unique_ptr<char[]> data;
  std::array<mmsghdr, kBatch> msgs{};
  std::array<iovec, kBatch> iov{};
  std::array<sockaddr_storage, kBatch> names{};
  alignas(cmsghdr) std::array<std::array<char, kControlSize>, kBatch> control{};
  // The received datagrams being forwarded, compacted: one flow's run is contiguous, as a GSO
  // message needs.
  std::array<iovec, kBatch> out{};
  UdpSender sender;
};

// One worker's share of one UDP service address: the bound (SO_REUSEPORT) socket and a flow
// table keyed by client address, each flow with its own connected backend socket. Datagrams
// from a client go out on its flow's socket; the backend's replies go back out of the listening
// socket, so they leave from the service address and port (with IP_PKTINFO choosing the source
// when the socket is bound to a wildcard address). Exists because UDP has no connection for the
// kernel to hand us: the flow table is the connection. Thread: owning worker loop.
class UdpProxy final {
 public:
  // `socket` comes from net::BindUdp. `balancer` may be null (no route yet: datagrams are
  // dropped). `arena`, `table` (the worker's flows) and `metrics` must outlive the proxy.
  static absl::StatusOr<std::unique_ptr<UdpProxy>> Create(
      event::EventLoop& loop, DatagramArena& arena, UdpFlowTable& table, base::UniqueFd socket,
      std::shared_ptr<Balancer> balancer, const UdpOptions& options, DataPathMetrics& metrics);
  UdpProxy(const UdpProxy&) = delete;
  UdpProxy& operator=(const UdpProxy&) = delete;
  // Closes every flow. Must not run inside one of this proxy's callbacks.
  ~UdpProxy();

  // A new route for this address. Flows whose endpoint is not in `balancer` (all of them when
  // it is null) are closed; the next datagram of their client picks again.
  void SetBalancer(std::shared_ptr<Balancer> balancer);
  // The sources admitted from now on (null: all). Flows of clients it excludes are closed.
  void SetSources(std::shared_ptr<const SourceFilter> sources);

  size_t flows() const { return flows_.size(); }
  const net::SocketAddress& local_address() const { return local_; }

 private:
  class Flow;
  enum class Drop {
    kNoEndpoint,      // no route, or the balancer has nothing to pick
    kFlowLimit,       // no flow to evict for a new client's socket (the FdBudget is spent)
    kBackendRefused,  // ICMP port unreachable from the backend: the flow is closed
    kBackendError,    // another ICMP error (host/net unreachable): the flow is closed
    kSocketError,     // no backend socket (EMFILE, ENOBUFS) or connect(2) failed
    kSendFailed,      // a send buffer was full (EAGAIN) or the kernel refused the datagram
    kTruncated,       // larger than a 64 KiB buffer (MSG_TRUNC)
    kSourceRange,     // a new client outside the service's loadBalancerSourceRanges
    kCount,
  };

  UdpProxy(event::EventLoop& loop, DatagramArena& arena, UdpFlowTable& table, base::UniqueFd socket,
           net::SocketAddress local, std::shared_ptr<Balancer> balancer, const UdpOptions& options,
           DataPathMetrics& metrics);
  void OnListenerReadable();
  // The flow for the arena's datagram i; nullptr if it was dropped (and counted).
  Flow* FlowToBackend(int i);
  // Sends the arena's out[first, first + count) on the flow's socket; returns how many went
  // out. A socket error closes the flow.
  int SendToBackend(Flow* flow, int first, int count);
  // The client's flow, opened if needed; nullptr if the datagram was dropped (and counted).
  Flow* FlowFor(const net::SocketAddress& client, msghdr& hdr);
  Flow* OpenFlow(const net::SocketAddress& client, msghdr& hdr);
  void SocketFailed(const net::SocketAddress& backend, std::string_view cause);
  void OnBackendReadable(Flow& flow);
  void ReplyToClient(Flow& flow, int n);
  // A connected socket reported an ICMP error: close the flow, forget the client's affinity.
  void BackendFailed(Flow& flow, int err);
  void OnIdleTimer(Flow& flow);
  // Removes the flow from the table now and frees it at the end of the loop iteration, so it
  // may be called from the flow's own callbacks.
  void CloseFlow(Flow& flow);
  void Count(Drop reason, int n = 1);

  event::EventLoop& loop_;
  DatagramArena& arena_;
  UdpFlowTable& table_;
  const UdpOptions options_;
  DataPathMetrics& metrics_;
  const net::SocketAddress local_;
  // Wildcard-bound: replies need an explicit source address (from the client's IP_PKTINFO).
  const bool wildcard_;
  base::UniqueFd socket_;
  std::unique_ptr<event::FileEvent> event_;  // after socket_: unregisters before the close
  std::shared_ptr<Balancer> balancer_;
  std::shared_ptr<const SourceFilter> sources_;
  absl::flat_hash_map<net::SocketAddress, std::unique_ptr<Flow>> flows_;
  std::array<base::Counter*, static_cast<size_t>(Drop::kCount)> dropped_{};
  base::MonoTime last_error_log_ = base::MonoTime::InfinitePast();
};

}  // namespace sluice::proxy
