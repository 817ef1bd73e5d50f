#include "metadata/p2p/p2p_store.h"

#include <gtest/gtest.h>

#include "metadata/p2p/in_process_p2p.h"

namespace ferry {
namespace {

TEST(P2PStoreTest, OwnKeysAreLocalOthersComeFromThePeerNamedInTheKey) {
  InProcessP2PNetwork network;
  auto a = CreateP2PStore(&network, {});
  auto b = CreateP2PStore(&network, {});
  ASSERT_TRUE(a.ok() && b.ok());
  auto* a_store = static_cast<P2PStore*>(a->get());
  network.Attach({"10.0.0.1", 9000}, a_store);
  ASSERT_TRUE((*a)->Put("ferry/ram/10.0.0.1:9000", "desc-a").ok());
  EXPECT_EQ(*a_store->GetLocal("ferry/ram/10.0.0.1:9000"), "desc-a");
  EXPECT_EQ(*(*b)->Get("ferry/ram/10.0.0.1:9000"), "desc-a");
  EXPECT_EQ((*b)->Get("ferry/ram/10.0.0.1:9001").status().code(), StatusCode::kUnavailable);
  EXPECT_EQ((*b)->Get("ferry/ram/no-port").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*b)->Get("ferry/rpc_meta/10.0.0.1:9000").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*a)->watcher(), nullptr);
  ASSERT_EQ((*a)->List("ferry/")->size(), 1u);
  EXPECT_TRUE((*a)->Delete("ferry/ram/10.0.0.1:9000").ok());
  EXPECT_EQ((*b)->Get("ferry/ram/10.0.0.1:9000").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*PeerOfKey("ferry/ram/[::1]:5"), (HostPort{"::1", 5}));
  EXPECT_EQ(CreateP2PStore(nullptr, {}).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
