// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cerrno>
#include <memory>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "lib/base/status.h"
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

namespace sluice::fastpath {

// Owns a `bpftool gen skeleton` object: T::open() in Create, T::destroy() in the destructor
// (which closes every map and program fd it created). Neither copyable nor movable, since libbpf
// keeps pointers into it. Thread: any (libbpf objects are not shared across threads here).
template <typename T>
class Skeleton final {
 public:
  // Opens the object, lets `configure` set map sizes and rodata, then loads it into the kernel.
  static absl::StatusOr<std::unique_ptr<Skeleton>> Create(
      absl::FunctionRef<absl::Status(T&)> configure) {
    T* raw = T::open();
    if (raw == nullptr) {
      return base::ErrnoStatus(errno, "bpf_object__open");
    }
    std::unique_ptr<Skeleton> skel(new Skeleton(raw));
    RETURN_IF_ERROR(configure(*raw));
    if (int err = T::load(raw); err != 0) {
      return base::ErrnoStatus(-err, "bpf_object__load");
    }
    return skel;
  }
  ~Skeleton() { T::destroy(obj_); }
  Skeleton(const Skeleton&) = delete;
  Skeleton& operator=(const Skeleton&) = delete;

  T* operator->() const { return obj_; }
  T& operator*() const { return *obj_; }

 private:
  explicit Skeleton(T* obj) : obj_(obj) {}
  T* const obj_;
};

// The status of a failed bpf(2) map call from errno, "<what>: <cause>": E2BIG (a full hash
// map or sockhash) is ResourceExhausted, so callers can tell "no room" from other failures.
inline absl::Status MapError(std::string_view what) {
  const int err = errno;
  absl::Status st = base::ErrnoStatus(err, what);
  return err == E2BIG ? absl::ResourceExhaustedError(st.message()) : st;
}

// A bpf_link: bpf_link__destroy closes it (which detaches it unless it is pinned).
struct LinkDeleter {
  void operator()(bpf_link* link) const { bpf_link__destroy(link); }
};
using LinkPtr = std::unique_ptr<bpf_link, LinkDeleter>;

// bpf_prog_attach of a program to a map (sockmap programs), detached in the destructor. libbpf
// 1.1 has no link-based sockmap attach (bpf_program__attach_sockmap arrived in 1.5), so this is
// the RAII stand-in for a bpf_link. Thread: any.
class ScopedProgAttach final {
 public:
  static absl::StatusOr<std::unique_ptr<ScopedProgAttach>> Create(int prog_fd, int target_fd,
                                                                  bpf_attach_type type) {
    if (bpf_prog_attach(prog_fd, target_fd, type, 0) != 0) {
      return base::ErrnoStatus(errno, "bpf_prog_attach");
    }
    return std::unique_ptr<ScopedProgAttach>(new ScopedProgAttach(prog_fd, target_fd, type));
  }
  ~ScopedProgAttach() { (void)bpf_prog_detach2(prog_fd_, target_fd_, type_); }
  ScopedProgAttach(const ScopedProgAttach&) = delete;
  ScopedProgAttach& operator=(const ScopedProgAttach&) = delete;

 private:
  ScopedProgAttach(int prog_fd, int target_fd, bpf_attach_type type)
      : prog_fd_(prog_fd), target_fd_(target_fd), type_(type) {}
  const int prog_fd_;
  const int target_fd_;
  const bpf_attach_type type_;
};

}  // namespace sluice::fastpath
