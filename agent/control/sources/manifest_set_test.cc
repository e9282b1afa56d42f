// SPDX-License-Identifier: Apache-2.0
#include "agent/control/sources/manifest_set.h"

#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace sluice::sources {
namespace {

namespace fs = std::filesystem;

std::string ServiceYaml(const std::string& name, int port) {
  return absl::StrCat("apiVersion: v1\nkind: Service\nmetadata:\n  name: ", name,
                      "\n  namespace: default\nspec:\n  clusterIP: 10.96.0.", port % 250,
                      "\n  ports:\n  - port: ", port, "\n");
}

// Lowers this process's soft RLIMIT_NOFILE to its lowest free descriptor number while it
// lives, so that every open() fails with EMFILE, as in an agent out of descriptors.
class OutOfDescriptors final {
 public:
  OutOfDescriptors() {
    getrlimit(RLIMIT_NOFILE, &saved_);
    const int lowest_free = dup(0);
    close(lowest_free);
    rlimit lim = saved_;
    lim.rlim_cur = static_cast<rlim_t>(lowest_free);
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  ~OutOfDescriptors() { setrlimit(RLIMIT_NOFILE, &saved_); }

 private:
  rlimit saved_{};
};

ManifestSet::ScanResult RescanOutOfDescriptors(ManifestSet& set) {
  OutOfDescriptors no_fds;
  return set.Rescan();
}

class ManifestSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/sluice-manifests-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Writes through a temp file and rename, so identity always changes.
  void Write(const std::string& name, const std::string& text) {
    const std::string tmp = dir_ + "/.tmp";
    std::ofstream(tmp) << text;
    fs::rename(tmp, dir_ + "/" + name);
  }
  std::vector<int> Ports(const ManifestSet& set) {
    std::vector<int> out;
    for (const auto& s : set.services()) {
      out.push_back(s->ports[0].port);
    }
    return out;
  }
  std::string dir_;
};

TEST_F(ManifestSetTest, LoadsOnlyManifestFilesOfADirectory) {
  Write("a.yaml", ServiceYaml("a", 80));
  Write("b.json", R"({"apiVersion":"v1","kind":"Service","metadata":{"name":"b"},)"
                  R"("spec":{"clusterIP":"10.96.0.2","ports":[{"port":81}]}})");
  Write("notes.txt", "not a manifest");
  Write(".a.yaml.swp", "garbage");
  ManifestSet set(dir_);
  auto r = set.Rescan();
  EXPECT_TRUE(r.changed);
  EXPECT_TRUE(r.errors.empty()) << r.errors[0];
  EXPECT_EQ(r.files_loaded, 2);
  EXPECT_EQ(Ports(set), (std::vector<int>{80, 81}));
  r = set.Rescan();
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(r.files_loaded, 0);  // nothing re-read
}

TEST_F(ManifestSetTest, BrokenFileKeepsItsLastGoodState) {
  Write("a.yaml", ServiceYaml("a", 80));
  ManifestSet set(dir_);
  set.Rescan();
  Write("a.yaml", "apiVersion: v1\nkind: Service\nmetadata: [unclosed\n");
  auto r = set.Rescan();
  EXPECT_FALSE(r.changed);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find(dir_ + "/a.yaml: "), std::string::npos) << r.errors[0];
  EXPECT_NE(r.errors[0].find("keeping this file's last good state"), std::string::npos);
  EXPECT_EQ(Ports(set), (std::vector<int>{80}));
  Write("a.yaml", ServiceYaml("a", 90));
  r = set.Rescan();
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(Ports(set), (std::vector<int>{90}));
}

TEST_F(ManifestSetTest, BadObjectKeepsItsLastGoodVersionOthersApply) {
  Write("a.yaml", ServiceYaml("a", 80) + "---\n" + ServiceYaml("b", 81));
  ManifestSet set(dir_);
  set.Rescan();
  Write("a.yaml", ServiceYaml("a", 70000) + "---\n" + ServiceYaml("b", 82));
  auto r = set.Rescan();
  EXPECT_TRUE(r.changed);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find("default/a"), std::string::npos) << r.errors[0];
  EXPECT_NE(r.errors[0].find("spec.ports[0].port"), std::string::npos) << r.errors[0];
  EXPECT_NE(r.errors[0].find("keeping its last good version"), std::string::npos) << r.errors[0];
  EXPECT_EQ(Ports(set), (std::vector<int>{80, 82}));
}

TEST_F(ManifestSetTest, RemovedFileRemovesItsObjects) {
  Write("a.yaml", ServiceYaml("a", 80));
  Write("b.yaml", ServiceYaml("b", 81));
  ManifestSet set(dir_);
  set.Rescan();
  fs::remove(dir_ + "/a.yaml");
  EXPECT_TRUE(set.Rescan().changed);
  EXPECT_EQ(Ports(set), (std::vector<int>{81}));
}

TEST_F(ManifestSetTest, DuplicateAcrossFilesFirstFileWins) {
  Write("a.yaml", ServiceYaml("web", 80));
  Write("b.yaml", ServiceYaml("web", 81));
  ManifestSet set(dir_);
  auto r = set.Rescan();
  EXPECT_EQ(Ports(set), (std::vector<int>{80}));
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find("b.yaml: Service default/web is also defined"), std::string::npos);
}

TEST_F(ManifestSetTest, SingleFileAndConfigMapSymlinks) {
  // A ConfigMap volume: name -> ..data/name, ..data -> a timestamped directory swapped by rename.
  fs::create_directory(dir_ + "/..v1");
  std::ofstream(dir_ + "/..v1/svc.yaml") << ServiceYaml("a", 80);
  fs::create_directory_symlink("..v1", dir_ + "/..data");
  fs::create_symlink("..data/svc.yaml", dir_ + "/svc.yaml");
  ManifestSet dir_set(dir_);
  dir_set.Rescan();
  EXPECT_EQ(Ports(dir_set), (std::vector<int>{80}));
  fs::create_directory(dir_ + "/..v2");
  std::ofstream(dir_ + "/..v2/svc.yaml") << ServiceYaml("a", 81);
  fs::create_directory_symlink("..v2", dir_ + "/..tmp");
  fs::rename(dir_ + "/..tmp", dir_ + "/..data");
  EXPECT_TRUE(dir_set.Rescan().changed);
  EXPECT_EQ(Ports(dir_set), (std::vector<int>{81}));

  ManifestSet file_set(dir_ + "/svc.yaml");
  file_set.Rescan();
  EXPECT_EQ(Ports(file_set), (std::vector<int>{81}));
}

// Out of descriptors, the directory cannot be listed: that is not an empty directory (which
// would delete every service); the state stays and the caller is asked to rescan.
TEST_F(ManifestSetTest, UnlistableDirectoryKeepsTheStateAndAsksForARetry) {
  Write("a.yaml", ServiceYaml("a", 80));
  ManifestSet set(dir_);
  set.Rescan();
  Write("b.yaml", ServiceYaml("b", 81));
  ManifestSet::ScanResult r = RescanOutOfDescriptors(set);
  EXPECT_TRUE(r.retry);
  EXPECT_FALSE(r.changed);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find("Too many open files"), std::string::npos) << r.errors[0];
  EXPECT_EQ(Ports(set), (std::vector<int>{80}));
  r = set.Rescan();
  EXPECT_FALSE(r.retry);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(Ports(set), (std::vector<int>{80, 81}));
}

// A file that cannot be read (unlike one that is read and found bad) is read again by the next
// Rescan, although it did not change.
TEST_F(ManifestSetTest, UnreadableFileKeepsItsStateAndIsReadAgain) {
  Write("a.yaml", ServiceYaml("a", 80));
  ManifestSet set(dir_ + "/a.yaml");  // a single file: listing opens nothing
  set.Rescan();
  Write("a.yaml", ServiceYaml("a", 90));
  ManifestSet::ScanResult r = RescanOutOfDescriptors(set);
  EXPECT_TRUE(r.retry);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(Ports(set), (std::vector<int>{80}));
  r = set.Rescan();
  EXPECT_FALSE(r.retry);
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.files_loaded, 1);
  EXPECT_EQ(Ports(set), (std::vector<int>{90}));
}

TEST_F(ManifestSetTest, MissingFileIsAnErrorNotACrash) {
  ManifestSet set(dir_ + "/nope.yaml");
  auto r = set.Rescan();
  EXPECT_FALSE(r.changed);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].find("No such file"), std::string::npos) << r.errors[0];
}

}  // namespace
}  // namespace sluice::sources
