#include "common/net_address.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <vector>

namespace ferry {
namespace {

TEST(NetAddressTest, WildcardAndLoopbackHosts) {
  for (const char* h : {"", "0.0.0.0", "::", "[::]", "*", "0:0::0", "::0", "[0:0::0]"}) {
    EXPECT_TRUE(IsWildcardHost(h)) << h;
  }
  for (const char* h : {"127.0.0.1", "10.0.0.1", "localhost", "::1", "[::1]"}) {
    EXPECT_FALSE(IsWildcardHost(h)) << h;
  }
  for (const char* h :
       {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "a.localhost", "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  }
  for (const char* h :
       {"10.0.0.1", "0.0.0.0", "::", "128.0.0.1", "example", "notlocalhost", "::ffff:10.0.0.1"}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
}

TEST(NetAddressTest, ParsesPortRanges) {
  EXPECT_EQ(*ParsePortRange("20000-20100"), (PortRange{20000, 20100}));
  EXPECT_EQ(*ParsePortRange("15000"), (PortRange{15000, 15000}));
  EXPECT_TRUE(ParsePortRange("")->unbounded());
  EXPECT_EQ(ParsePortRange("20000-20100")->ToString(), "20000-20100");
  for (const char* bad : {"0-10", "10-5", "1-65536", "a-b", "100-", "-100", "1-2-3", " 1-2"}) {
    Result<PortRange> r = ParsePortRange(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("FIRST-LAST"), std::string::npos) << r.status();
  }
}

TEST(NetAddressTest, RouteTowardsLoopbackIsLoopback) {
  Result<std::string> local = LocalAddressTowards({"127.0.0.1", 2379});
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(*local, "127.0.0.1");
  EXPECT_FALSE(LocalAddressTowards({"no-such-host.invalid", 1}).ok());
}

// 0.0.0.0 listens on IPv4 only, so the route to an IPv6 store must not become its advertised
// address (peers would dial an address nothing listens on); a loopback store's route is
// replaced by an interface address when the machine has one.
TEST(NetAddressTest, AnIpv4WildcardIsAdvertisedByAnIpv4Address) {
  const HostPort v6_store{"::1", 2379};
  Result<std::string> over_v6 = DefaultAdvertiseHost("0.0.0.0", &v6_store);
  EXPECT_FALSE(over_v6.ok() && over_v6->find(':') != std::string::npos) << *over_v6;
  const HostPort v4_store{"127.0.0.1", 2379};
  Result<std::string> over_v4 = DefaultAdvertiseHost("0.0.0.0", &v4_store);
  ASSERT_TRUE(over_v4.ok()) << over_v4.status();
  EXPECT_EQ(over_v4->find(':'), std::string::npos) << *over_v4;
  if (FirstNonLoopbackAddress(false).ok()) EXPECT_FALSE(IsLoopbackHost(*over_v4)) << *over_v4;
}

// A range is honoured in order, and an exhausted range names itself and the listener.
TEST(NetAddressTest, ListensInsideTheRangeAndReportsExhaustion) {
  // Find a range of three free ports.
  std::vector<BoundListener> held;
  PortRange range;
  for (uint32_t base = 20000; base < 60000 && held.empty(); base += 97) {
    range = {static_cast<uint16_t>(base), static_cast<uint16_t>(base + 2)};
    Result<BoundListener> a = ListenTcpInRange("127.0.0.1", range, "test");
    if (!a.ok() || a->port != range.first) continue;
    held.push_back(std::move(a).value());
  }
  ASSERT_FALSE(held.empty());
  for (int i = 0; i < 2; ++i) {
    Result<BoundListener> next = ListenTcpInRange("127.0.0.1", range, "test");
    ASSERT_TRUE(next.ok()) << next.status();  // ports of the range still free
    EXPECT_GE(next->port, range.first);
    EXPECT_LE(next->port, range.last);
    held.push_back(std::move(next).value());
  }
  Result<BoundListener> none = ListenTcpInRange("127.0.0.1", range, "tcp data");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(
      none.status().message().find("no free port for tcp data in port range " + range.ToString()),
      std::string::npos)
      << none.status();
  EXPECT_EQ(ListenTcpInRange("no-such-host.invalid", {}, "rpc").status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
