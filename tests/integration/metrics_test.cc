// The Prometheus endpoint (EngineOptions::metrics_port, FERRY_METRICS_PORT) against Debian's
// own Prometheus: promtool accepts what /metrics serves, and a real prometheus scraping a
// running engine sees its byte counter move by exactly the bytes a transfer moved.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "ferry/transfer_engine.h"
#include "test_servers.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using testing::HttpGetLocal;
using testing::TempDir;
using testing::WaitFor;

EngineOptions TcpOnly() {
  EngineOptions options;
  options.transports = {"tcp"};
  return options;
}

// Two engines in this process; the initiator writes into the target's buffer over tcp.
struct Pair {
  TransferEngine initiator, target;
  std::vector<char> src, dst;
  SegmentId peer = 0;

  // `metrics_port_env`: FERRY_METRICS_PORT while the initiator (only) starts.
  void Init(const EngineOptions& initiator_options, size_t length,
            const char* metrics_port_env = nullptr) {
    ASSERT_TRUE(target.init(TcpOnly()).ok());
    if (metrics_port_env != nullptr) ::setenv("FERRY_METRICS_PORT", metrics_port_env, 1);
    Status started = initiator.init(initiator_options);
    ::unsetenv("FERRY_METRICS_PORT");
    ASSERT_TRUE(started.ok()) << started;
    src.assign(length, 'm');
    dst.assign(length, 0);
    ASSERT_TRUE(initiator.registerLocalMemory(src.data(), length, "cpu").ok());
    ASSERT_TRUE(target.registerLocalMemory(dst.data(), length, "cpu").ok());
    Result<SegmentId> id = initiator.openSegment(target.localSegmentName());
    ASSERT_TRUE(id.ok()) << id.status();
    peer = *id;
  }
  void Write(size_t length) {
    Result<BatchId> batch = initiator.allocateBatchID(1);
    ASSERT_TRUE(batch.ok());
    ASSERT_TRUE(initiator
                    .submitTransfer(*batch, {{OpCode::kWrite, src.data(), peer,
                                              reinterpret_cast<uint64_t>(dst.data()), length}})
                    .ok());
    Result<BatchStatus> done = initiator.waitBatch(*batch, 10s);
    ASSERT_TRUE(done.ok()) << done.status();
    ASSERT_EQ(done->state, TransferState::kCompleted) << done->first_error;
    ASSERT_TRUE(initiator.freeBatchID(*batch).ok());
  }
};

// The value of the sample `name{...}` whose labels include every one of `labels` (each
// `key="value"`), from Prometheus text; nullopt when there is none.
std::optional<double> Sample(const std::string& text, const std::string& name,
                             const std::vector<std::string>& labels) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    bool all = true;
    for (const std::string& l : labels) all = all && line.find(l) != std::string::npos;
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return std::nullopt;
}

int RunShell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(MetricsEndpointTest, PromtoolAcceptsWhatTheEndpointServes) {
  // The port from the environment (0: a free one); a malformed one is refused.
  ASSERT_EQ(::setenv("FERRY_METRICS_PORT", "nine", 1), 0);
  TransferEngine bad;
  Status refused = bad.init(TcpOnly());
  ASSERT_EQ(::unsetenv("FERRY_METRICS_PORT"), 0);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("FERRY_METRICS_PORT"), std::string::npos) << refused;
  Pair pair;
  pair.Init(TcpOnly(), 1 << 20, "0");
  if (HasFatalFailure()) return;
  const uint16_t port = pair.initiator.metricsPort();
  ASSERT_NE(port, 0);
  EXPECT_EQ(pair.target.metricsPort(), 0);  // off by default
  // A port that is taken fails init, naming the option.
  EngineOptions taken = TcpOnly();
  taken.metrics_port = port;
  TransferEngine second;
  Status busy = second.init(taken);
  EXPECT_EQ(busy.code(), StatusCode::kUnavailable) << busy;
  EXPECT_NE(busy.message().find("metrics_port"), std::string::npos) << busy;
  // The same port from FERRY_METRICS_PORT (every engine of a process reads it, the first
  // serves it): the engine starts, without an endpoint; host:port names the address as well.
  ASSERT_EQ(::setenv("FERRY_METRICS_PORT", ("127.0.0.1:" + std::to_string(port)).c_str(), 1), 0);
  TransferEngine third;
  Status shared = third.init(TcpOnly());
  ASSERT_EQ(::unsetenv("FERRY_METRICS_PORT"), 0);
  EXPECT_TRUE(shared.ok()) << shared;
  EXPECT_EQ(third.metricsPort(), 0);

  constexpr size_t kMoved = (1 << 20) + 4096;
  pair.Write(1 << 20);
  pair.Write(4096);
  Result<std::string> text = HttpGetLocal(port, "/metrics");
  ASSERT_TRUE(text.ok()) << text.status();
  const std::string peer = "peer=\"" + pair.target.localSegmentName() + "\"";
  std::optional<double> written =
      Sample(*text, "ferry_transfer_bytes_total", {peer, "transport=\"tcp\"", "op=\"write\""});
  ASSERT_TRUE(written.has_value()) << *text;
  EXPECT_EQ(*written, static_cast<double>(kMoved));
  EXPECT_EQ(Sample(*text, "ferry_transfer_operations_total", {peer}), 2.0);
  EXPECT_EQ(Sample(*text, "ferry_transfer_latency_seconds_count", {peer}), 2.0);
  EXPECT_EQ(Sample(*text, "ferry_registrations_total", {"transport=\"tcp\""}), 1.0);
  EXPECT_TRUE(Sample(*text, "ferry_transport_events_total", {"event=\"connections_opened\""}));
  EXPECT_TRUE(Sample(*text, "ferry_metadata_operations_total", {"op=\"get\""}));

  Result<TempDir> dir = TempDir::Create("metrics");
  ASSERT_TRUE(dir.ok()) << dir.status();
  const std::string file = dir->path() + "/metrics.txt";
  std::ofstream(file) << *text;
  const std::string log = dir->path() + "/promtool.log";
  const int rc = RunShell("/usr/bin/promtool check metrics < " + file + " > " + log + " 2>&1");
  std::stringstream said;
  said << std::ifstream(log).rdbuf();
  EXPECT_EQ(rc, 0) << "promtool check metrics:\n" << said.str() << "\non:\n" << *text;
}

// The value of an instant query's single result, from Prometheus' JSON answer.
std::optional<double> QueryValue(const testing::PrometheusServer& prometheus,
                                 const std::string& promql) {
  Result<std::string> body = prometheus.Query(promql);
  if (!body.ok()) return std::nullopt;
  const nlohmann::json reply = nlohmann::json::parse(*body, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded() || reply.value("status", "") != "success") return std::nullopt;
  const nlohmann::json& result = reply["data"]["result"];
  if (!result.is_array() || result.size() != 1) return std::nullopt;
  return std::stod(result[0]["value"][1].get<std::string>());
}

TEST(MetricsEndpointTest, PrometheusScrapesTheByteCounterOfARunningEngine) {
  EngineOptions options = TcpOnly();
  options.metrics_port = 0;
  Pair pair;
  pair.Init(options, 1 << 20);
  if (HasFatalFailure()) return;
  const uint16_t port = pair.initiator.metricsPort();
  ASSERT_NE(port, 0);
  auto prometheus = testing::PrometheusServer::Start({"127.0.0.1:" + std::to_string(port)}, 500ms);
  ASSERT_TRUE(prometheus.ok()) << prometheus.status();
  const std::string query = "ferry_transfer_bytes_total{job=\"ferry\",transport=\"tcp\",peer=\"" +
                            pair.target.localSegmentName() + "\",op=\"write\"}";

  // A first transfer makes the series; prometheus scrapes it.
  constexpr size_t kFirst = 4096, kSecond = 1 << 20;
  pair.Write(kFirst);
  EXPECT_TRUE(
      WaitFor([&] { return QueryValue(**prometheus, query) == double{kFirst}; }, 20s, 100ms))
      << "prometheus never saw " << kFirst << " bytes; it answers "
      << (*prometheus)->Query(query).value_or("(no answer)");
  // The counter it scrapes grows by exactly the bytes of the next transfer.
  pair.Write(kSecond);
  EXPECT_TRUE(WaitFor([&] { return QueryValue(**prometheus, query) == double{kFirst + kSecond}; },
                      20s, 100ms))
      << "prometheus never saw " << kFirst + kSecond << " bytes; it answers "
      << (*prometheus)->Query(query).value_or("(no answer)");
}

}  // namespace
}  // namespace ferry
