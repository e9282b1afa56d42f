// SPDX-License-Identifier: Apache-2.0
#include "agent/dataplane/proxy/pipe_pool.h"

#include <fcntl.h>
#include <unistd.h>

#include <vector>

#include "gtest/gtest.h"

namespace sluice::proxy {
namespace {

TEST(PipePoolTest, PipesAreSizedNonBlockingAndCloexec) {
  PipePool pool({.pipe_size = 256 * 1024});
  auto pipe = pool.Get();
  ASSERT_TRUE(pipe.ok()) << pipe.status();
  // Root or within fs.pipe-max-size (1 MiB by default) gets what it asks for.
  EXPECT_EQ((*pipe)->capacity(), 256u * 1024);
  EXPECT_EQ(fcntl((*pipe)->write_fd(), F_GETPIPE_SZ), 256 * 1024);
  EXPECT_TRUE(fcntl((*pipe)->read_fd(), F_GETFL) & O_NONBLOCK);
  EXPECT_TRUE(fcntl((*pipe)->write_fd(), F_GETFD) & FD_CLOEXEC);
  EXPECT_EQ((*pipe)->bytes_in_pipe(), 0u);
}

TEST(PipePoolTest, LargePipesOnlyWithinTheBudget) {
  PipePool pool({.pipe_size = 256 * 1024, .budget_bytes = 600 * 1024});
  std::vector<std::unique_ptr<Pipe>> pipes(3);
  for (auto& p : pipes) {
    p = *pool.Get();
  }
  EXPECT_EQ(pipes[0]->capacity(), 256u * 1024);
  EXPECT_EQ(pipes[1]->capacity(), 256u * 1024);
  // A third would pass 600 KiB: the kernel's default instead.
  const size_t small = pipes[2]->capacity();
  EXPECT_LT(small, 256u * 1024);
  EXPECT_EQ(pool.open_bytes(), 512u * 1024 + small);
  // A large pipe closed (it held bytes) frees its share of the budget.
  ASSERT_EQ(write(pipes[0]->write_fd(), "x", 1), 1);
  pipes[0]->Added(1);
  pool.Put(std::move(pipes[0]));
  EXPECT_EQ(pool.open_bytes(), 256u * 1024 + small);
  EXPECT_EQ((*pool.Get())->capacity(), 256u * 1024);
}

TEST(PipePoolTest, EmptyPipeIsReused) {
  PipePool pool({});
  std::unique_ptr<Pipe> pipe = *pool.Get();
  Pipe* raw = pipe.get();
  pool.Put(std::move(pipe));
  EXPECT_EQ(pool.idle(), 1u);
  std::unique_ptr<Pipe> again = *pool.Get();
  EXPECT_EQ(again.get(), raw);
  EXPECT_EQ(pool.created(), 1u);
  EXPECT_EQ(pool.idle(), 0u);
}

TEST(PipePoolTest, NonEmptyPipeIsClosedNotPooled) {
  PipePool pool({});
  std::unique_ptr<Pipe> pipe = *pool.Get();
  ASSERT_EQ(write(pipe->write_fd(), "x", 1), 1);
  pipe->Added(1);
  int read_fd = pipe->read_fd();
  pool.Put(std::move(pipe));
  EXPECT_EQ(pool.idle(), 0u);
  EXPECT_EQ(pool.closed_non_empty(), 1u);
  EXPECT_EQ(fcntl(read_fd, F_GETFD), -1);  // closed (nothing else opened fds in between)
}

TEST(PipePoolTest, IdleListIsBounded) {
  PipePool pool({.max_idle = 2});
  std::vector<std::unique_ptr<Pipe>> pipes(3);
  for (auto& p : pipes) {
    p = *pool.Get();
  }
  for (auto& p : pipes) {
    pool.Put(std::move(p));
  }
  EXPECT_EQ(pool.idle(), 2u);
  EXPECT_EQ(pool.created(), 3u);
  EXPECT_EQ(pool.open_bytes(), 2u * 1024 * 1024);  // the third, closed, left the budget
  EXPECT_EQ(pool.closed_non_empty(), 0u);
}

}  // namespace
}  // namespace sluice::proxy
