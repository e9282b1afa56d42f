// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/vip/strict_arp.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "lib/base/file.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/base/unique_fd.h"

namespace sluice::vip {
namespace {

// What kube-proxy's IPVS proxier ensures with strictARP (pkg/proxy/ipvs, sysctlArpIgnore and
// sysctlArpAnnounce). Only conf/all: the kernel applies the larger of conf/all and conf/<link>
// for both, so raising conf/all covers every link, present and future.
struct Knob {
  const char* name;
  const char* path;
  int want;
};
constexpr Knob kKnobs[] = {
    {"net.ipv4.conf.all.arp_ignore", "/proc/sys/net/ipv4/conf/all/arp_ignore", 1},
    {"net.ipv4.conf.all.arp_announce", "/proc/sys/net/ipv4/conf/all/arp_announce", 2},
};

constexpr size_t kMaxRecordBytes = 4096;

struct Change {
  std::string name;
  int original = 0;
  int set = 0;
};

// The record file: "netns <dev>:<inode>", then "<sysctl> <original> <set>" per change.
struct Record {
  std::string netns;
  std::vector<Change> changes;
};

const Knob* FindKnob(const std::string& name) {
  for (const Knob& k : kKnobs) {
    if (k.name == name) {
      return &k;
    }
  }
  return nullptr;
}

absl::StatusOr<int> ReadSysctl(const Knob& knob) {
  ASSIGN_OR_RETURN(std::string text, base::ReadFile(knob.path, 64));
  int value = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &value)) {
    return absl::InternalError(absl::StrCat("read ", knob.path, ": not a number: ", text));
  }
  return value;
}

absl::Status WriteSysctl(const Knob& knob, int value) {
  base::UniqueFd fd(::open(knob.path, O_WRONLY | O_CLOEXEC));
  const std::string text = absl::StrCat(value, "\n");
  if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    return base::ErrnoStatus(errno, absl::StrCat("write ", knob.path));
  }
  return absl::OkStatus();
}

// The calling thread's network namespace (sysctls under /proc/sys/net are per namespace).
absl::StatusOr<std::string> ThisNetns() {
  struct stat st {};
  if (::stat("/proc/thread-self/ns/net", &st) != 0) {
    return base::ErrnoStatus(errno, "stat /proc/thread-self/ns/net");
  }
  return absl::StrCat(st.st_dev, ":", st.st_ino);
}

absl::StatusOr<std::optional<Record>> ReadRecord(const std::string& path) {
  absl::StatusOr<std::string> text = base::ReadFile(path, kMaxRecordBytes);
  if (absl::IsNotFound(text.status())) {
    return std::optional<Record>();
  }
  RETURN_IF_ERROR(text.status());
  Record record;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipWhitespace())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    Change c;
    if (f.size() == 2 && f[0] == "netns") {
      record.netns = std::string(f[1]);
    } else if (f.size() == 3 && absl::SimpleAtoi(f[1], &c.original) &&
               absl::SimpleAtoi(f[2], &c.set)) {
      c.name = std::string(f[0]);
      record.changes.push_back(std::move(c));
    } else if (!absl::StartsWith(line, "#")) {
      return absl::DataLossError(absl::StrCat(path, ": unreadable line \"", line, "\""));
    }
  }
  return std::optional<Record>(std::move(record));
}

// Written to a temporary file and renamed, so a crash leaves the old record or the new one.
absl::Status WriteRecord(const std::string& path, const Record& record) {
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0 &&
      ::mkdir(path.substr(0, slash).c_str(), 0700) != 0 && errno != EEXIST) {
    return base::ErrnoStatus(errno, absl::StrCat("mkdir ", path.substr(0, slash)));
  }
  std::string text = absl::StrCat(
      "# sysctls sluice-agent raised for strict ARP: name, original value, value set.\n"
      "# sluice-agent --cleanup restores them.\nnetns ",
      record.netns, "\n");
  for (const Change& c : record.changes) {
    absl::StrAppend(&text, c.name, " ", c.original, " ", c.set, "\n");
  }
  const std::string tmp = path + ".tmp";
  base::UniqueFd fd(
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd || ::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
      ::fsync(fd.get()) != 0) {
    absl::Status status = base::ErrnoStatus(errno, absl::StrCat("write ", tmp));
    ::unlink(tmp.c_str());
    return status;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status status = base::ErrnoStatus(errno, absl::StrCat("rename ", tmp, " -> ", path));
    ::unlink(tmp.c_str());
    return status;
  }
  return absl::OkStatus();
}

Change* FindChange(Record& record, const char* name) {
  for (Change& c : record.changes) {
    if (c.name == name) {
      return &c;
    }
  }
  return nullptr;
}

}  // namespace

absl::Status EnsureStrictArp(const std::string& record_path) {
  ASSIGN_OR_RETURN(std::string netns, ThisNetns());
  ASSIGN_OR_RETURN(std::optional<Record> earlier, ReadRecord(record_path));
  if (earlier && earlier->netns != netns) {
    // Another agent's (one --state-dir shared by two namespaces): overwriting it would lose
    // what its --cleanup must restore.
    return absl::FailedPreconditionError(
        absl::StrCat(record_path, " records sysctls of another network namespace (", earlier->netns,
                     "); give each agent its own --state-dir"));
  }
  // An earlier run's record still knows the values from before sluice.
  Record record = earlier ? *earlier : Record{netns, {}};
  std::vector<const Knob*> raise;
  std::string done;
  for (const Knob& k : kKnobs) {
    ASSIGN_OR_RETURN(int current, ReadSysctl(k));
    if (current >= k.want) {
      absl::StrAppend(&done, done.empty() ? "" : ", ", k.name, "=", current);
      continue;
    }
    if (Change* c = FindChange(record, k.name)) {
      c->set = k.want;
    } else {
      record.changes.push_back({k.name, current, k.want});
    }
    absl::StrAppend(&done, done.empty() ? "" : ", ", k.name, " ", current, " -> ", k.want);
    raise.push_back(&k);
  }
  if (raise.empty()) {
    LOG(INFO) << "strict ARP already in place (" << done << ")";
    return absl::OkStatus();
  }
  // Recorded before the change: after a crash in between, --cleanup writes back what is there.
  RETURN_IF_ERROR(WriteRecord(record_path, record));
  for (const Knob* k : raise) {
    RETURN_IF_ERROR(WriteSysctl(*k, k->want));
  }
  LOG(INFO) << "strict ARP, so that no other host learns this node's MAC for a VIP: " << done
            << " (--cleanup restores them from " << record_path << ")";
  return absl::OkStatus();
}

absl::Status RestoreStrictArp(const std::string& record_path) {
  ASSIGN_OR_RETURN(std::optional<Record> record, ReadRecord(record_path));
  if (!record) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::string netns, ThisNetns());
  if (record->netns != netns) {
    LOG(WARNING) << record_path << " records sysctls of another network namespace ("
                 << record->netns << "); left alone";
    return absl::OkStatus();
  }
  absl::Status result;
  for (const Change& c : record->changes) {
    const Knob* k = FindKnob(c.name);
    absl::StatusOr<int> current = k ? ReadSysctl(*k) : absl::NotFoundError("unknown sysctl");
    if (!current.ok()) {
      result.Update(base::Annotate(current.status(), absl::StrCat(record_path, ": ", c.name)));
    } else if (*current != c.set) {
      LOG(INFO) << c.name << " is " << *current << ", not the " << c.set
                << " sluice set: left alone";
    } else if (absl::Status st = WriteSysctl(*k, c.original); !st.ok()) {
      result.Update(st);
    } else {
      LOG(INFO) << "restored " << c.name << "=" << c.original << " (strict ARP undone)";
    }
  }
  if (result.ok() && ::unlink(record_path.c_str()) != 0 && errno != ENOENT) {
    result = base::ErrnoStatus(errno, absl::StrCat("unlink ", record_path));
  }
  return result;
}

}  // namespace sluice::vip
