// getMetrics() with engines in this process talking tcp: bytes, slices and operations of a
// transfer; failures by reason (a STALE target, a range outside every buffer); registrations,
// metadata calls and notifications; peers past metrics_max_peers folded into one series. The
// Prometheus endpoint is checked against promtool and a real prometheus in
// tests/integration/metrics_test.cc.
#include "engine/engine_metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "common/wait_for.h"
#include "ferry/metrics.h"
#include "ferry/transfer_engine.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

EngineOptions TcpOnly() {
  EngineOptions options;
  options.transports = {"tcp"};
  options.slice_size = 64 << 10;
  return options;
}

const TransportMetrics* FindTransport(const EngineMetrics& m, std::string_view name) {
  for (const TransportMetrics& t : m.transports) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

uint64_t Counter(const TransportMetrics& t, std::string_view name) {
  for (const auto& [n, v] : t.counters) {
    if (n == name) return v;
  }
  return 0;
}

const MetadataOpMetrics* FindOp(const EngineMetrics& m, std::string_view op) {
  for (const MetadataOpMetrics& o : m.metadata.ops) {
    if (o.op == op) return &o;
  }
  return nullptr;
}

// Submits one request and waits for its end; its final status.
TransferStatus Move(TransferEngine& engine, const TransferRequest& request) {
  Result<BatchId> batch = engine.allocateBatchID(1);
  EXPECT_TRUE(batch.ok()) << batch.status();
  EXPECT_TRUE(engine.submitTransfer(*batch, {request}).ok());
  EXPECT_TRUE(engine.waitBatch(*batch, 10s).ok());
  Result<TransferStatus> status = engine.getTransferStatus(*batch, 0);
  EXPECT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(engine.freeBatchID(*batch).ok());
  return status.ok() ? *status : TransferStatus{};
}

TEST(EngineMetricsTest, HistogramBucketsAreLog2Microseconds) {
  using engine::AtomicHistogram;
  EXPECT_EQ(AtomicHistogram::BucketOf(0), 0u);
  EXPECT_EQ(AtomicHistogram::BucketOf(1000), 0u);  // 1 us: (0, 1 us]
  EXPECT_EQ(AtomicHistogram::BucketOf(1001), 1u);  // (1 us, 2 us]
  EXPECT_EQ(AtomicHistogram::BucketOf(2000), 1u);
  EXPECT_EQ(AtomicHistogram::BucketOf(1'000'000), 10u);  // 1 ms: (512 us, 1024 us]
  EXPECT_EQ(AtomicHistogram::BucketOf(uint64_t{1} << 62), LatencyHistogram::kBuckets - 1);
  EXPECT_DOUBLE_EQ(LatencyHistogram::UpperBoundSeconds(0), 1e-6);
  EXPECT_DOUBLE_EQ(LatencyHistogram::UpperBoundSeconds(10), 1024e-6);
  AtomicHistogram h;
  h.Record(1500ns);
  h.Record(3ms);
  LatencyHistogram read = h.Read();
  EXPECT_EQ(read.count, 2u);
  EXPECT_EQ(read.buckets[1], 1u);
  EXPECT_EQ(read.buckets[12], 1u);  // 3 ms: (2048 us, 4096 us]
  EXPECT_NEAR(read.sum_seconds, 0.0030015, 1e-9);
  EXPECT_DOUBLE_EQ(read.QuantileSeconds(0.5), 2e-6);
  EXPECT_DOUBLE_EQ(read.QuantileSeconds(1.0), 4096e-6);
}

TEST(EngineMetricsTest, CountsTransfersFailuresRegistrationsAndNotifications) {
  TransferEngine initiator, target;
  EngineOptions target_options = TcpOnly();
  target_options.max_pending_notifies = 1;
  ASSERT_TRUE(initiator.init(TcpOnly()).ok());
  ASSERT_TRUE(target.init(target_options).ok());
  EXPECT_TRUE(initiator.getMetrics().transfers.empty());

  constexpr size_t kLen = 256 << 10;  // four 64 KiB slices
  std::vector<char> src(kLen, 'x'), dst(kLen, 0);
  ASSERT_TRUE(initiator.registerLocalMemory(src.data(), kLen, "cpu").ok());
  ASSERT_TRUE(target.registerLocalMemory(dst.data(), kLen, "cpu").ok());
  Result<SegmentId> peer = initiator.openSegment(target.localSegmentName());
  ASSERT_TRUE(peer.ok()) << peer.status();
  const uint64_t remote = reinterpret_cast<uint64_t>(dst.data());

  TransferStatus done = Move(initiator, {OpCode::kWrite, src.data(), *peer, remote, kLen});
  ASSERT_EQ(done.state, TransferState::kCompleted) << done.reason;
  EngineMetrics m = initiator.getMetrics();
  EXPECT_EQ(m.segment, initiator.localSegmentName());
  const TransferSeries* s = m.Find("tcp", target.localSegmentName());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->bytes_written, kLen);
  EXPECT_EQ(s->bytes_read, 0u);
  EXPECT_EQ(s->slices, 4u);
  EXPECT_EQ(s->completed, 1u);
  EXPECT_EQ(s->operations(), 1u);
  EXPECT_EQ(s->failures(), 0u);
  EXPECT_EQ(s->in_flight, 0u);
  EXPECT_EQ(s->latency.count, 1u);
  EXPECT_GT(s->latency.sum_seconds, 0.0);

  // A read back: counted by direction.
  ASSERT_EQ(Move(initiator, {OpCode::kRead, src.data(), *peer, remote, 4096}).state,
            TransferState::kCompleted);
  // The target re-registers its buffer (a new generation): the initiator's cached descriptor
  // is stale, the target refuses the write, and the task fails Stale, counted as such.
  ASSERT_TRUE(target.unregisterLocalMemory(dst.data()).ok());
  ASSERT_TRUE(target.registerLocalMemory(dst.data(), kLen, "cpu").ok());
  TransferStatus stale = Move(initiator, {OpCode::kWrite, src.data(), *peer, remote, kLen});
  EXPECT_EQ(stale.state, TransferState::kFailed);
  EXPECT_EQ(stale.reason.code(), StatusCode::kStale) << stale.reason;
  // A range outside every buffer fails before any transport is chosen.
  TransferStatus outside =
      Move(initiator, {OpCode::kWrite, src.data(), *peer, remote + 2 * kLen, 16});
  EXPECT_EQ(outside.reason.code(), StatusCode::kInvalidArgument) << outside.reason;

  m = initiator.getMetrics();
  s = m.Find("tcp", target.localSegmentName());
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->bytes_written, kLen);  // the stale attempt moved nothing
  EXPECT_EQ(s->bytes_read, 4096u);
  EXPECT_EQ(s->completed, 2u);
  EXPECT_EQ(s->failures(StatusCode::kStale), 1u);
  EXPECT_EQ(s->stale_refreshes, 1u);
  EXPECT_EQ(s->failures(), 1u);
  EXPECT_EQ(s->retries, 0u);  // never re-aimed
  EXPECT_EQ(s->in_flight, 0u);
  const TransferSeries* early = m.Find(kNoTransport, target.localSegmentName());
  ASSERT_NE(early, nullptr);
  EXPECT_EQ(early->failures(StatusCode::kInvalidArgument), 1u);
  EXPECT_EQ(early->bytes(), 0u);
  const TransferSeries all = m.Total();
  EXPECT_EQ(all.operations(), 4u);
  EXPECT_EQ(all.bytes(), kLen + 4096);

  // Registrations, per transport; the transport's own counters; metadata calls.
  const TransportMetrics* tcp = FindTransport(m, "tcp");
  ASSERT_NE(tcp, nullptr);
  EXPECT_EQ(tcp->registrations, 1u);
  EXPECT_EQ(tcp->registered_bytes, kLen);
  EXPECT_GT(Counter(*tcp, "connections_opened"), 0u);
  const EngineMetrics tm = target.getMetrics();
  ASSERT_NE(FindTransport(tm, "tcp"), nullptr);
  EXPECT_EQ(FindTransport(tm, "tcp")->registrations, 2u);
  EXPECT_EQ(FindTransport(tm, "tcp")->unregistrations, 1u);
  EXPECT_EQ(m.metadata.store, "p2p");
  ASSERT_NE(FindOp(m, "get"), nullptr);
  EXPECT_GT(FindOp(m, "get")->count, 0u);  // openSegment and the refreshes fetched
  EXPECT_EQ(FindOp(m, "get")->latency.count, FindOp(m, "get")->count);

  // Notifications: the target keeps one; the second is refused.
  EXPECT_TRUE(initiator.sendNotify(*peer, {"", "one"}).ok());
  EXPECT_EQ(initiator.sendNotify(*peer, {"", "two"}).code(), StatusCode::kBusy);
  m = initiator.getMetrics();
  EXPECT_EQ(m.notifications.sent, 1u);
  EXPECT_EQ(m.notifications.send_failures, 1u);
  const NotificationMetrics n = target.getMetrics().notifications;
  EXPECT_EQ(n.received, 1u);
  EXPECT_EQ(n.refused, 1u);
}

// Tasks that end CANCELED or TIMEOUT while their slices are at the transport: each ends counted
// once, by its reason, and the in-flight gauge drains to 0 once the transport has reported
// every slice (it neither leaks nor goes negative).
TEST(EngineMetricsTest, CanceledAndTimedOutTasksLeaveNothingInFlight) {
  constexpr size_t kLen = 32 << 20;  // 512 slices of 64 KiB
  // Declared before the engines: the transport may report slices until the engines stop.
  std::vector<char> src(kLen, 'c'), dst(kLen, 0);
  EngineOptions hurried = TcpOnly();
  hurried.task_timeout = 5ms;
  TransferEngine initiator, target;
  ASSERT_TRUE(initiator.init(hurried).ok());
  ASSERT_TRUE(target.init(TcpOnly()).ok());
  ASSERT_TRUE(initiator.registerLocalMemory(src.data(), kLen, "cpu").ok());
  ASSERT_TRUE(target.registerLocalMemory(dst.data(), kLen, "cpu").ok());
  Result<SegmentId> peer = initiator.openSegment(target.localSegmentName());
  ASSERT_TRUE(peer.ok()) << peer.status();
  const TransferRequest write{OpCode::kWrite, src.data(), *peer,
                              reinterpret_cast<uint64_t>(dst.data()), kLen};
  std::vector<TransferState> ended;
  for (bool cancel : {true, false}) {
    Result<BatchId> batch = initiator.allocateBatchID(1);
    ASSERT_TRUE(batch.ok()) << batch.status();
    ASSERT_TRUE(initiator.submitTransfer(*batch, {write}).ok());
    if (cancel) EXPECT_TRUE(initiator.cancelBatch(*batch).ok());
    ASSERT_TRUE(initiator.waitBatch(*batch, 10s).ok());
    Result<TransferStatus> status = initiator.getTransferStatus(*batch, 0);
    ASSERT_TRUE(status.ok()) << status.status();
    ended.push_back(status->state);
    EXPECT_TRUE(initiator.freeBatchID(*batch).ok());
  }
  const auto count = [&](TransferState state) {
    return static_cast<uint64_t>(std::count(ended.begin(), ended.end(), state));
  };
  // A task canceled before its plan chose a transport is counted under kNoTransport: the sum
  // over every series of this one peer.
  TransferSeries s;
  EXPECT_TRUE(WaitFor(
      [&] {
        s = initiator.getMetrics().Total();
        return s.in_flight == 0;
      },
      10s))
      << s.in_flight << " slices in flight";
  EXPECT_EQ(s.operations(), 2u);
  EXPECT_EQ(s.completed, count(TransferState::kCompleted));
  EXPECT_EQ(s.failures(StatusCode::kCanceled), count(TransferState::kCanceled));
  EXPECT_EQ(s.failures(StatusCode::kTimeout), count(TransferState::kTimeout));
  EXPECT_EQ(s.retries, 0u);
  EXPECT_EQ(s.bytes_written, s.slices * (64 << 10));
  EXPECT_LE(s.bytes_written, 2 * kLen);
}

// EngineOptions::log_level sets the process's log threshold; a bad one is refused.
TEST(EngineMetricsTest, LogLevelComesFromTheEngineOption) {
  const LogLevel before = GetLogLevel();
  EngineOptions options = TcpOnly();
  options.log_level = "loud";
  TransferEngine bad;
  Status refused = bad.init(options);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("log_level"), std::string::npos) << refused;
  options.log_level = before == LogLevel::kError ? "info" : "error";
  TransferEngine engine;
  ASSERT_TRUE(engine.init(options).ok());
  EXPECT_EQ(GetLogLevel(), before == LogLevel::kError ? LogLevel::kInfo : LogLevel::kError);
  SetLogLevel(before);
}

TEST(EngineMetricsTest, PeersPastTheCapFoldIntoOneSeries) {
  EngineOptions capped = TcpOnly();
  capped.metrics_max_peers = 1;
  TransferEngine initiator, first, second;
  ASSERT_TRUE(initiator.init(capped).ok());
  ASSERT_TRUE(first.init(TcpOnly()).ok());
  ASSERT_TRUE(second.init(TcpOnly()).ok());
  constexpr size_t kLen = 4096;
  std::vector<char> src(kLen, 'y'), a(kLen), b(kLen);
  ASSERT_TRUE(initiator.registerLocalMemory(src.data(), kLen, "cpu").ok());
  ASSERT_TRUE(first.registerLocalMemory(a.data(), kLen, "cpu").ok());
  ASSERT_TRUE(second.registerLocalMemory(b.data(), kLen, "cpu").ok());
  for (auto [engine, buf] : {std::pair{&first, &a}, std::pair{&second, &b}}) {
    Result<SegmentId> id = initiator.openSegment(engine->localSegmentName());
    ASSERT_TRUE(id.ok()) << id.status();
    const uint64_t remote = reinterpret_cast<uint64_t>(buf->data());
    ASSERT_EQ(Move(initiator, {OpCode::kWrite, src.data(), *id, remote, kLen}).state,
              TransferState::kCompleted);
  }
  const EngineMetrics m = initiator.getMetrics();
  ASSERT_EQ(m.transfers.size(), 2u);
  const TransferSeries* own = m.Find("tcp", first.localSegmentName());
  const TransferSeries* other = m.Find("tcp", kOtherPeer);
  ASSERT_NE(own, nullptr);
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(m.Find("tcp", second.localSegmentName()), nullptr);
  EXPECT_EQ(own->bytes_written, kLen);
  EXPECT_EQ(other->bytes_written, kLen);
  EXPECT_EQ(m.Total("tcp").bytes_written, 2 * kLen);
  EngineOptions bad = TcpOnly();
  bad.metrics_max_peers = 0;
  TransferEngine refused;
  EXPECT_EQ(refused.init(bad).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
