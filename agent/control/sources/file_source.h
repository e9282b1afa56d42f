// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "lib/base/backoff.h"
#include "lib/base/unique_fd.h"
#include "lib/event/event_loop.h"

#include "agent/control/config/mux.h"
#include "agent/control/sources/manifest_set.h"
#include "agent/control/sources/source_metrics.h"

namespace sluice::sources {

// --source=file:PATH. Loads the manifests at start, then follows changes with inotify on the
// directory (the path's parent for a single file), which also sees editors that write a new
// file and rename it over the old one and ConfigMap symlink swaps. Each reload pushes the whole
// state as one kSet per kind, so a file's edits apply atomically. What cannot be read (out of
// descriptors, say) keeps its last state and is read again after a backoff, since no file event
// tells when reading works again.
// Thread: the control-plane loop.
class FileSource final {
 public:
  // Events are coalesced for this long: a save is often several inotify events.
  static constexpr absl::Duration kSettleDelay = absl::Milliseconds(50);

  // `policy`: see config::AddressPolicy (no API server validated these files).
  static absl::StatusOr<std::unique_ptr<FileSource>> Create(const std::string& path,
                                                            const config::AddressPolicy& policy,
                                                            config::SourceChannel* channel,
                                                            event::EventLoop& loop,
                                                            SourceMetricFamilies& metrics);
  ~FileSource() = default;

 private:
  FileSource(std::string path, const config::AddressPolicy& policy, config::SourceChannel* channel,
             SourceMetricFamilies& metrics);
  void OnInotify();
  void Reload();

  const std::string path_;
  config::SourceChannel* channel_;
  SourceMetrics metrics_;
  ManifestSet manifests_;
  base::UniqueFd inotify_;
  std::unique_ptr<event::FileEvent> watch_;
  std::unique_ptr<event::Timer> settle_;
  std::unique_ptr<event::Timer> retry_;
  base::Backoff retry_backoff_{base::Backoff::Options{}};
};

}  // namespace sluice::sources
