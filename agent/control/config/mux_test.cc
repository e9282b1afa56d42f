// SPDX-License-Identifier: Apache-2.0
#include "agent/control/config/mux.h"

#include "gtest/gtest.h"

namespace sluice::config {
namespace {

ServicePtr Svc(const std::string& name, int port, const std::string& ns = "default") {
  auto s = std::make_shared<Service>();
  s->meta.id = {ns, name};
  ServicePort p;
  p.port = port;
  s->ports.push_back(p);
  return s;
}

// Records every notification as "add ns/name", "update ns/name", "delete ns/name".
class Recorder final : public ServiceHandler, public EndpointSliceHandler {
 public:
  void OnServiceUpdate(const ServicePtr& prev, const ServicePtr& cur) override {
    const char* what = !prev ? "add " : !cur ? "delete " : "update ";
    events.push_back(what + (cur ? cur : prev)->meta.id.ToString() +
                     (cur ? ":" + std::to_string(cur->ports[0].port) : ""));
  }
  void OnServicesSynced() override { events.push_back("services synced"); }
  void OnEndpointSliceUpdate(const EndpointSlicePtr& prev, const EndpointSlicePtr& cur) override {
    events.push_back(std::string(!prev  ? "add slice "
                                 : !cur ? "delete slice "
                                        : "update slice ") +
                     (cur ? cur : prev)->meta.id.ToString());
  }
  void OnEndpointSlicesSynced() override { events.push_back("slices synced"); }
  std::vector<std::string> Take() { return std::exchange(events, {}); }
  std::vector<std::string> events;
};

class MuxTest : public ::testing::Test {
 protected:
  MuxTest() {
    a_ = mux_.Channel("a");
    b_ = mux_.Channel("b");
    mux_.AddServiceHandler(&rec_);
    mux_.AddEndpointSliceHandler(&rec_);
  }
  using V = std::vector<std::string>;
  Mux mux_;
  Recorder rec_;
  SourceChannel* a_;
  SourceChannel* b_;
};

TEST_F(MuxTest, AddUpdateRemoveWithinOneSource) {
  a_->UpdateServices(Op::kAdd, {Svc("web", 80)});
  a_->UpdateServices(Op::kAdd, {Svc("web", 80)});  // same value: nothing
  a_->UpdateServices(Op::kAdd, {Svc("web", 81)});
  a_->UpdateServices(Op::kRemove, {Svc("web", 0)});
  a_->UpdateServices(Op::kRemove, {Svc("web", 0)});  // already gone: nothing
  EXPECT_EQ(rec_.Take(), (V{"add default/web:80", "update default/web:81", "delete default/web"}));
}

TEST_F(MuxTest, SetReplacesTheSourceState) {
  a_->UpdateServices(Op::kSet, {Svc("x", 1), Svc("y", 2)});
  rec_.Take();
  a_->UpdateServices(Op::kSet, {Svc("y", 3), Svc("z", 4)});
  EXPECT_EQ(rec_.Take(), (V{"delete default/x", "update default/y:3", "add default/z:4"}));
  EXPECT_EQ(mux_.Services().size(), 2u);
}

TEST_F(MuxTest, OverlapBetweenSourcesNeverLosesAnObject) {
  b_->UpdateServices(Op::kAdd, {Svc("web", 8080)});
  a_->UpdateServices(Op::kAdd, {Svc("web", 80)});    // earlier source wins
  a_->UpdateServices(Op::kRemove, {Svc("web", 0)});  // falls back to b's copy
  b_->UpdateServices(Op::kSet, {});
  EXPECT_EQ(rec_.Take(), (V{"add default/web:8080", "update default/web:80",
                            "update default/web:8080", "delete default/web"}));
}

TEST_F(MuxTest, RemovingFromTheLosingSourceChangesNothing) {
  a_->UpdateServices(Op::kAdd, {Svc("web", 80)});
  b_->UpdateServices(Op::kAdd, {Svc("web", 8080)});
  b_->UpdateServices(Op::kRemove, {Svc("web", 0)});
  EXPECT_EQ(rec_.Take(), (V{"add default/web:80"}));
  ASSERT_EQ(mux_.Services().size(), 1u);
  EXPECT_EQ(mux_.Services()[0]->ports[0].port, 80);
}

TEST_F(MuxTest, SameNameInOtherNamespaceIsAnotherObject) {
  a_->UpdateServices(Op::kAdd, {Svc("web", 80, "a"), Svc("web", 81, "b")});
  a_->UpdateServices(Op::kRemove, {Svc("web", 0, "a")});
  EXPECT_EQ(rec_.Take(), (V{"add a/web:80", "add b/web:81", "delete a/web"}));
}

TEST_F(MuxTest, SlicesAreSeparateFromServices) {
  auto slice = std::make_shared<EndpointSlice>();
  slice->meta.id = {"default", "web"};
  a_->UpdateEndpointSlices(Op::kAdd, {slice});
  a_->UpdateServices(Op::kAdd, {Svc("web", 80)});
  a_->UpdateEndpointSlices(Op::kSet, {});
  EXPECT_EQ(rec_.Take(),
            (V{"add slice default/web", "add default/web:80", "delete slice default/web"}));
}

TEST_F(MuxTest, SyncedOnceEverySourceHasSynced) {
  a_->MarkSynced();
  EXPECT_FALSE(mux_.AllSynced());
  EXPECT_TRUE(rec_.Take().empty());
  b_->MarkSynced();
  EXPECT_TRUE(mux_.AllSynced());
  b_->MarkSynced();
  EXPECT_EQ(rec_.Take(), (V{"services synced", "slices synced"}));
}

TEST_F(MuxTest, ChannelIsFoundByName) { EXPECT_EQ(mux_.Channel("a"), a_); }

}  // namespace
}  // namespace sluice::config
