// Honest errors from the metadata store clients: a store that cannot be reached is reported as
// what happened (connection refused, no route to host, timed out after N ms, a name that does
// not resolve), with the time it really took, for each kind of store (http, etcd, redis). Real
// sockets in network namespaces made here: a closed port, an iptables DROP, an unreachable
// route, an unresolvable name. The errors reach the user through init(), which publishes the
// engine's segment in the store.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "fault_fixture.h"

namespace ferry::fault {
namespace {

struct Case {
  std::string scheme;    // "http", "etcd", "redis"
  std::string suffix;    // after host:port
};

class StoreErrorTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const std::string unsupported = testing::NetworkFaultsUnsupported();
    if (!unsupported.empty()) GTEST_SKIP() << unsupported;
    auto pair = testing::NetnsPair::Create("err" + GetParam().scheme.substr(0, 2));
    ASSERT_TRUE(pair.ok()) << pair.status();
    pair_ = std::move(pair).value();
    in_a_ = std::make_unique<testing::InNamespace>(pair_->a());
    ASSERT_TRUE(in_a_->ok());
  }
  void TearDown() override {
    in_a_.reset();
    pair_.reset();
  }

  // init() against a store at `host`:`port`; its error and how long it took.
  Status InitAgainst(const std::string& host, uint16_t port, double* ms) {
    EngineOptions options;
    options.host = testing::NetnsPair::kAddressA;
    options.transports = {"tcp"};
    options.request_timeout = std::chrono::milliseconds(kTimeoutMs);
    options.metadata_conn = GetParam().scheme + "://" + host + ":" + std::to_string(port) +
                            GetParam().suffix;
    TransferEngine engine;
    const auto start = SteadyClock::now();
    Status s = engine.init(options);
    *ms = MillisSince(start);
    return s;
  }

  static constexpr int kTimeoutMs = 600;
  std::unique_ptr<testing::NetnsPair> pair_;
  std::unique_ptr<testing::InNamespace> in_a_;
};

TEST_P(StoreErrorTest, NetworkErrorsSayWhatHappened) {
  const std::string scheme = GetParam().scheme;
  double ms = 0;
  // A closed port on a live host: refused, at once.
  Status refused = InitAgainst(testing::NetnsPair::kAddressB, 9, &ms);
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find("connection refused"), std::string::npos) << refused;
  EXPECT_LT(ms, kTimeoutMs) << refused;
  Figure("%s, closed port: %.0f ms: %s", scheme.c_str(), ms, refused.ToString().c_str());

  // A name that does not resolve (RFC 6761 reserves .invalid).
  Status dns = InitAgainst("no-such-store.invalid", 2379, &ms);
  EXPECT_EQ(dns.code(), StatusCode::kUnavailable) << dns;
  EXPECT_NE(dns.message().find("cannot resolve 'no-such-store.invalid'"), std::string::npos)
      << dns;
  Figure("%s, unresolvable name: %.0f ms: %s", scheme.c_str(), ms, dns.ToString().c_str());

  // An unreachable route: no route to host, at once.
  ASSERT_TRUE(pair_->Run(testing::NetnsPair::kA, "ip route add unreachable 10.98.0.0/24").ok());
  Status route = InitAgainst("10.98.0.7", 2379, &ms);
  EXPECT_EQ(route.code(), StatusCode::kUnavailable) << route;
  EXPECT_NE(route.message().find("no route to host"), std::string::npos) << route;
  EXPECT_LT(ms, kTimeoutMs) << route;
  Figure("%s, unreachable route: %.0f ms: %s", scheme.c_str(), ms, route.ToString().c_str());

  // A host that drops every packet: timed out, after the real time.
  auto drop = testing::IptablesRule::Add(pair_->b(), "INPUT -i " + pair_->veth_b() + " -j DROP");
  ASSERT_TRUE(drop.ok()) << drop.status();
  Status timeout = InitAgainst(testing::NetnsPair::kAddressB, 2379, &ms);
  EXPECT_EQ(timeout.code(), StatusCode::kUnavailable) << timeout;
  EXPECT_NE(timeout.message().find("timed out after "), std::string::npos) << timeout;
  EXPECT_GE(ms, kTimeoutMs * 0.9) << timeout;
  Figure("%s, DROP: %.0f ms: %s", scheme.c_str(), ms, timeout.ToString().c_str());
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreErrorTest,
                         ::testing::Values(Case{"http", "/metadata"}, Case{"etcd", ""},
                                           Case{"redis", ""}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.scheme;
                         });

}  // namespace
}  // namespace ferry::fault
