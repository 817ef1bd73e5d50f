#include "metadata/store_factory.h"

#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(StoreFactoryTest, ParsesEveryAcceptedForm) {
  Result<StoreAddress> a = ParseStoreAddress("etcd://10.0.0.1:2379,10.0.0.2:2379");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, StoreAddress::Kind::kEtcd);
  ASSERT_EQ(a->endpoints.size(), 2u);
  EXPECT_EQ(a->endpoints[1], (HostPort{"10.0.0.2", 2379}));

  a = ParseStoreAddress("127.0.0.1:2379");  // bare list = etcd
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->kind, StoreAddress::Kind::kEtcd);

  a = ParseStoreAddress("redis://alice:s3cret@cache:6380/3");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, StoreAddress::Kind::kRedis);
  EXPECT_EQ(a->user, "alice");
  EXPECT_EQ(a->password, "s3cret");
  EXPECT_EQ(a->db, 3);
  EXPECT_EQ(a->endpoints[0], (HostPort{"cache", 6380}));

  a = ParseStoreAddress("redis://pw@h:1");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->user, "");
  EXPECT_EQ(a->password, "pw");

  a = ParseStoreAddress("http://meta:8080/metadata");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->kind, StoreAddress::Kind::kHttp);
  EXPECT_EQ(a->path, "/metadata");

  a = ParseStoreAddress("P2PHANDSHAKE");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->kind, StoreAddress::Kind::kP2P);

  a = ParseStoreAddress("memory://unit");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->name, "unit");
  a = ParseStoreAddress("etcd://[::1]:2379");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->endpoints[0].host, "::1");
}

TEST(StoreFactoryTest, RejectsMalformedStringsListingTheForms) {
  for (const char* bad :
       {"", "zookeeper://h:1", "etcd://", "etcd://h", "etcd://h:0", "etcd://h:70000", "etcd://h:1,",
        "h:1,,h:2", "redis://h", "redis://h:1/16", "redis://h:1/x", "http://h:1", "http://h:1/",
        "http://h/p", "http://h:1/p?x=1", "p2phandshake", "memory://a/b", "etcd://::1:2379",
        // Brackets only around an IPv6 host (found by fuzz/store_address_fuzzer.cc: "[[(]:29"
        // parsed to host "[(", which HostPort::ToString wrote as the unparseable "[(:29").
        "[[(]:29", "etcd://a]b:1", "etcd://[a]b]:1", "etcd://[::1]]:1"}) {
    Result<StoreAddress> a = ParseStoreAddress(bad);
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(a.status().message().find("P2PHANDSHAKE"), std::string::npos) << a.status();
  }
}

TEST(StoreFactoryTest, P2PNeedsADescriptorSource) {
  Result<std::unique_ptr<MetadataStore>> store = CreateMetadataStore("P2PHANDSHAKE", {});
  EXPECT_EQ(store.status().code(), StatusCode::kInvalidArgument);
}

TEST(StoreFactoryTest, CreatesAMemoryStore) {
  Result<std::unique_ptr<MetadataStore>> store = CreateMetadataStore("memory://factory", {});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->scheme(), "memory");
}

}  // namespace
}  // namespace ferry
