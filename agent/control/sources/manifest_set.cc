// SPDX-License-Identifier: Apache-2.0
#include "agent/control/sources/manifest_set.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/file.h"

#include "agent/control/config/decode.h"

namespace sluice::sources {

namespace fs = std::filesystem;

namespace {

bool IsManifestName(const std::string& name) {
  // Hidden files cover editor swap files and ConfigMap's "..data" machinery.
  return !name.empty() && name[0] != '.' &&
         (absl::EndsWith(name, ".yaml") || absl::EndsWith(name, ".yml") ||
          absl::EndsWith(name, ".json"));
}

// Keeps the previous version of an object whose new version was rejected.
template <typename T>
void KeepPrevious(const std::vector<std::shared_ptr<const T>>& previous,
                  const config::NamespacedName& id, std::vector<std::shared_ptr<const T>>& next) {
  for (const auto& obj : previous) {
    if (obj->meta.id == id) {
      next.push_back(obj);
      return;
    }
  }
}

template <typename T>
bool SameObjects(const std::vector<std::shared_ptr<const T>>& a,
                 const std::vector<std::shared_ptr<const T>>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const auto& x, const auto& y) { return x == y || *x == *y; });
}

}  // namespace

bool ManifestSet::ListFiles(std::vector<std::string>* files,
                            std::vector<std::string>* errors) const {
  std::error_code ec;
  if (!fs::is_directory(path_, ec)) {
    files->push_back(path_);  // a single file; a missing one is reported by Load
    return true;
  }
  for (fs::directory_iterator it(path_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (IsManifestName(it->path().filename().string()) && it->is_regular_file(type_ec)) {
      files->push_back(it->path().string());
    }
  }
  if (ec) {
    // Out of descriptors, say: an unreadable listing is not an empty directory.
    errors->push_back(absl::StrCat(path_, ": ", ec.message(), " (keeping the last good state)"));
    return false;
  }
  std::sort(files->begin(), files->end());
  return true;
}

ManifestSet::LoadResult ManifestSet::Load(const std::string& file, off_t size, FileState& state,
                                          std::vector<std::string>* errors) const {
  if (static_cast<uint64_t>(size) > kMaxFileBytes) {
    errors->push_back(absl::StrCat(file, ": larger than the limit of ", kMaxFileBytes,
                                   " bytes (keeping this file's last good state)"));
    return LoadResult::kBad;
  }
  auto text = base::ReadFile(file, kMaxFileBytes);
  if (!text.ok()) {
    errors->push_back(
        absl::StrCat(text.status().message(), " (keeping this file's last good state)"));
    return LoadResult::kUnreadable;
  }
  auto manifest = config::DecodeManifest(*text, config::Format::kAuto, policy_);
  if (!manifest.ok()) {
    errors->push_back(absl::StrCat(file, ": ", manifest.status().message(),
                                   " (keeping this file's last good state)"));
    return LoadResult::kBad;
  }
  std::vector<config::ServicePtr> services = std::move(manifest->services);
  std::vector<config::EndpointSlicePtr> slices = std::move(manifest->endpoint_slices);
  for (const auto& err : manifest->errors) {
    std::string kept;
    if (err.id && err.kind == "Service") {
      size_t before = services.size();
      KeepPrevious(state.services, *err.id, services);
      kept = services.size() > before ? " (keeping its last good version)" : "";
    } else if (err.id && err.kind == "EndpointSlice") {
      size_t before = slices.size();
      KeepPrevious(state.slices, *err.id, slices);
      kept = slices.size() > before ? " (keeping its last good version)" : "";
    }
    errors->push_back(absl::StrCat(file, ": ", err.ToString(), kept));
  }
  state.services = std::move(services);
  state.slices = std::move(slices);
  return LoadResult::kLoaded;
}

ManifestSet::ScanResult ManifestSet::Rescan() {
  ScanResult result;
  std::vector<std::string> files;
  if (!ListFiles(&files, &result.errors)) {
    result.retry = true;
    return result;
  }
  std::map<std::string, FileState> next;
  for (const std::string& file : files) {
    struct stat st;
    FileState& state = next[file];
    auto old = files_.find(file);
    if (old != files_.end()) {
      state = old->second;
    }
    if (::stat(file.c_str(), &st) != 0) {
      result.errors.push_back(absl::StrCat(file, ": ", std::strerror(errno)));
      next.erase(file);
      continue;
    }
    Identity id{st.st_dev, st.st_ino, st.st_size,
                st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec,
                st.st_ctim.tv_sec * 1'000'000'000LL + st.st_ctim.tv_nsec};
    if (old != files_.end() && old->second.identity == id) {
      continue;
    }
    switch (Load(file, st.st_size, state, &result.errors)) {
      case LoadResult::kLoaded:
        state.identity = id;
        ++result.files_loaded;
        break;
      case LoadResult::kBad:
        state.identity = id;  // not read again until the file changes
        break;
      case LoadResult::kUnreadable:
        result.retry = true;  // the old identity (if any) makes the next Rescan read it again
        break;
    }
  }
  const bool files_removed = next.size() < files_.size() ||
                             std::any_of(files_.begin(), files_.end(),
                                         [&](const auto& kv) { return !next.contains(kv.first); });
  files_ = std::move(next);
  auto old_services = std::move(services_);
  auto old_slices = std::move(slices_);
  Merge(&result.errors);
  result.changed =
      files_removed || !SameObjects(old_services, services_) || !SameObjects(old_slices, slices_);
  return result;
}

void ManifestSet::Merge(std::vector<std::string>* errors) {
  std::set<config::NamespacedName> seen_services;
  std::set<config::NamespacedName> seen_slices;
  services_.clear();
  slices_.clear();
  for (const auto& [file, state] : files_) {
    for (const auto& s : state.services) {
      if (seen_services.insert(s->meta.id).second) {
        services_.push_back(s);
      } else {
        errors->push_back(absl::StrCat(file, ": Service ", s->meta.id.ToString(),
                                       " is also defined in an earlier file; ignoring this one"));
      }
    }
    for (const auto& s : state.slices) {
      if (seen_slices.insert(s->meta.id).second) {
        slices_.push_back(s);
      } else {
        errors->push_back(absl::StrCat(file, ": EndpointSlice ", s->meta.id.ToString(),
                                       " is also defined in an earlier file; ignoring this one"));
      }
    }
  }
  auto by_id = [](const auto& a, const auto& b) { return a->meta.id < b->meta.id; };
  std::sort(services_.begin(), services_.end(), by_id);
  std::sort(slices_.begin(), slices_.end(), by_id);
}

}  // namespace sluice::sources
