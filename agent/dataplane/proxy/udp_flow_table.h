// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <list>

#include "absl/container/flat_hash_map.h"
#include "lib/net/address.h"

#include "agent/dataplane/proxy/admission.h"

namespace sluice::proxy {

// A worker's UDP flows across all of its listeners, least recently used first, with a cap on
// their number and one per client IP. A full table (or an exhausted FdBudget) makes room by
// closing the flow idle the longest instead of refusing the new client; a client at its own cap
// gives up its own flow idle the longest. A flood of new source ports then costs the flooder's
// old flows their socket (or, past the table, old idle flows), never the service to everyone,
// and many clients behind one address (a NAT, another node's SNAT) keep being served.
// Thread: owning worker loop.
class UdpFlowTable final {
 public:
  // A flow as the table sees it. Its owner inserts it after Admit, touches it per datagram and
  // erases it when it closes; Evict asks the owner to close it (and so erase it).
  class Entry {
   public:
    explicit Entry(const net::IpAddress& source) : source_(source) {}
    virtual ~Entry() = default;
    const net::IpAddress& source() const { return source_; }

   protected:
    virtual void Evict() = 0;

   private:
    friend class UdpFlowTable;
    const net::IpAddress source_;
    std::list<Entry*>::iterator position_;         // in lru_
    std::list<Entry*>::iterator source_position_;  // in its source's list
    bool linked_ = false;
  };

  enum class Admission {
    kAdmitted,      // room made (evicting if needed): Insert the new flow
    kNoDescriptor,  // the FdBudget is spent and this worker has no flow to give back
  };

  // `fds` may be null (no budget); else it must outlive the table.
  UdpFlowTable(size_t max_flows, size_t max_per_source, FdBudget* fds);
  UdpFlowTable(const UdpFlowTable&) = delete;
  UdpFlowTable& operator=(const UdpFlowTable&) = delete;

  // Decides on a new flow of `source`, evicting the least recently used flows for room.
  Admission Admit(const net::IpAddress& source);
  void Insert(Entry& flow);  // the most recently used; takes one fd of the budget
  void Touch(Entry& flow);   // a datagram went through it
  void Erase(Entry& flow);   // idempotent

  size_t size() const { return lru_.size(); }
  size_t evictions() const { return evictions_; }
  size_t FlowsOf(const net::IpAddress& source) const;

 private:
  bool EvictOldest();
  void Evict(Entry& flow);

  const size_t max_flows_;
  const size_t max_per_source_;
  FdBudget* const fds_;
  std::list<Entry*> lru_;  // front: idle the longest
  // Each client IP's flows, likewise ordered; no empty lists.
  absl::flat_hash_map<net::IpAddress, std::list<Entry*>> by_source_;
  size_t evictions_ = 0;
};

}  // namespace sluice::proxy
