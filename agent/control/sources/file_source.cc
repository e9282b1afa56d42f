// SPDX-License-Identifier: Apache-2.0
#include "agent/control/sources/file_source.h"

#include <sys/epoll.h>
#include <sys/inotify.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "lib/base/log.h"
#include "lib/base/status.h"

namespace sluice::sources {

FileSource::FileSource(std::string path, const config::AddressPolicy& policy,
                       config::SourceChannel* channel, SourceMetricFamilies& metrics)
    : path_(std::move(path)),
      channel_(channel),
      metrics_(metrics, channel->name()),
      manifests_(path_, policy) {}

absl::StatusOr<std::unique_ptr<FileSource>> FileSource::Create(const std::string& path,
                                                               const config::AddressPolicy& policy,
                                                               config::SourceChannel* channel,
                                                               event::EventLoop& loop,
                                                               SourceMetricFamilies& metrics) {
  auto source = std::unique_ptr<FileSource>(new FileSource(path, policy, channel, metrics));
  FileSource* self = source.get();
  source->inotify_.Reset(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
  if (!source->inotify_) {
    return base::ErrnoStatus(errno, "inotify_init1");
  }
  std::error_code ec;
  const std::string dir = std::filesystem::is_directory(path, ec)
                              ? path
                              : std::filesystem::path(path).parent_path().string();
  // IN_ATTR catches touch and chmod; the rest cover write, rename-over, create and delete.
  constexpr uint32_t kMask = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE |
                             IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF;
  if (::inotify_add_watch(source->inotify_.get(), dir.empty() ? "." : dir.c_str(), kMask) < 0) {
    return base::ErrnoStatus(errno, absl::StrCat("inotify_add_watch(", dir, ")"));
  }
  source->settle_ = loop.CreateTimer([self] { self->Reload(); });
  source->retry_ = loop.CreateTimer([self] { self->Reload(); });
  ASSIGN_OR_RETURN(source->watch_, loop.Watch(source->inotify_.get(), EPOLLIN,
                                              [self](uint32_t) { self->OnInotify(); }));
  source->Reload();
  channel->MarkSynced();
  return source;
}

void FileSource::OnInotify() {
  alignas(inotify_event) char buf[16 * 1024];
  while (true) {
    ssize_t n = ::read(inotify_.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;  // EAGAIN: drained
    }
    for (char* p = buf; p < buf + n;) {
      auto* ev = reinterpret_cast<inotify_event*>(p);
      if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
        LOG(ERROR) << channel_->name() << ": the watched directory was removed or moved; keeping "
                   << "the last state, restart to follow a new one";
        metrics_.Error("watch").Inc();
      }
      p += sizeof(inotify_event) + ev->len;
    }
  }
  if (!settle_->armed()) {
    settle_->Arm(kSettleDelay);
  }
}

void FileSource::Reload() {
  ManifestSet::ScanResult result = manifests_.Rescan();
  for (const auto& err : result.errors) {
    LOG(ERROR) << channel_->name() << ": " << err;
  }
  metrics_.decode_errors.Inc(static_cast<double>(result.errors.size()));
  (result.errors.empty() ? metrics_.reloads_ok : metrics_.reloads_failed).Inc();
  metrics_.services.Set(static_cast<double>(manifests_.services().size()));
  metrics_.endpoint_slices.Set(static_cast<double>(manifests_.endpoint_slices().size()));
  metrics_.last_sync.Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
  if (result.retry) {
    metrics_.Error("read").Inc();
    if (!retry_->armed()) {
      retry_->Arm(retry_backoff_.Next());
    }
  } else {
    retry_backoff_.Reset();
  }
  if (!result.changed) {
    return;
  }
  LOG(INFO) << channel_->name() << ": loaded " << manifests_.services().size() << " services, "
            << manifests_.endpoint_slices().size() << " endpoint slices (" << result.files_loaded
            << " files read)";
  metrics_.updates.Inc();
  channel_->UpdateServices(config::Op::kSet, manifests_.services());
  channel_->UpdateEndpointSlices(config::Op::kSet, manifests_.endpoint_slices());
}

}  // namespace sluice::sources
