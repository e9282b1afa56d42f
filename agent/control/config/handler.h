// SPDX-License-Identifier: Apache-2.0
#pragma once

#include "agent/control/config/model.h"

namespace sluice::config {

// Receives changes of the merged view. prev == nullptr is an add, cur == nullptr a delete.
// Called with the mux's lock held, in order: implementations only record (see
// proxier::ChangeTracker) and must not call back into the mux.
class ServiceHandler {
 public:
  virtual ~ServiceHandler() = default;
  virtual void OnServiceUpdate(const ServicePtr& prev, const ServicePtr& cur) = 0;
  // Every source has delivered its initial state once.
  virtual void OnServicesSynced() = 0;
};

class EndpointSliceHandler {
 public:
  virtual ~EndpointSliceHandler() = default;
  virtual void OnEndpointSliceUpdate(const EndpointSlicePtr& prev, const EndpointSlicePtr& cur) = 0;
  virtual void OnEndpointSlicesSynced() = 0;
};

// Told when several updates of the merged view form one change (a source's relist after an
// outage: its Services and EndpointSlices). Calls nest; only the outermost pair counts. Called
// with the mux's lock held; implementations only record.
class BatchHandler {
 public:
  virtual ~BatchHandler() = default;
  // Updates from now until OnBatchEnd belong together: none is to be acted on alone.
  virtual void OnBatchBegin() = 0;
  virtual void OnBatchEnd() = 0;
};

}  // namespace sluice::config
