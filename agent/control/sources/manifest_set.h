// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "agent/control/config/decode.h"
#include "agent/control/config/model.h"

namespace sluice::sources {

// The last good objects of every manifest file under a path (a file, or the *.yaml, *.yml and
// *.json files of a directory, symlinks followed as in a mounted ConfigMap). Rescan() re-reads
// only files whose identity (inode, size, mtime, ctime) changed. A file that cannot be read or
// parsed keeps its last good objects; a bad object in a good file keeps its own last good
// version. Thread: the owner's.
class ManifestSet final {
 public:
  // Largest manifest file read; bigger ones are rejected (and keep their last good state).
  static constexpr size_t kMaxFileBytes = 32 << 20;

  struct ScanResult {
    bool changed = false;             // the merged objects differ from the previous scan's
    int files_loaded = 0;             // files (re)read and applied
    std::vector<std::string> errors;  // one line per problem: "<file>: <what>"
    // The directory or a file could not be read (EMFILE, ENOMEM, EIO...), as opposed to read
    // and found bad: what was there is kept, and no file event may come to say when reading
    // works again, so the caller rescans later.
    bool retry = false;
  };

  explicit ManifestSet(std::string path, const config::AddressPolicy& policy = {})
      : path_(std::move(path)), policy_(policy) {}

  ScanResult Rescan();

  // The merged objects of every file; for a namespace/name in several files, the file that
  // sorts first wins (reported as an error).
  const std::vector<config::ServicePtr>& services() const { return services_; }
  const std::vector<config::EndpointSlicePtr>& endpoint_slices() const { return slices_; }

 private:
  struct Identity {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
    friend bool operator==(const Identity&, const Identity&) = default;
  };
  struct FileState {
    Identity identity;
    std::vector<config::ServicePtr> services;
    std::vector<config::EndpointSlicePtr> slices;
  };

  enum class LoadResult { kLoaded, kBad, kUnreadable };

  // The manifest files under path_; false (with errors) when a directory cannot be listed.
  bool ListFiles(std::vector<std::string>* files, std::vector<std::string>* errors) const;
  // Reads and decodes one file into `state`; unless kLoaded (with errors), `state` is as it was.
  LoadResult Load(const std::string& file, off_t size, FileState& state,
                  std::vector<std::string>* errors) const;
  void Merge(std::vector<std::string>* errors);

  const std::string path_;
  const config::AddressPolicy policy_;
  std::map<std::string, FileState> files_;
  std::vector<config::ServicePtr> services_;
  std::vector<config::EndpointSlicePtr> slices_;
};

}  // namespace sluice::sources
