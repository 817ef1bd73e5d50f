// EngineCounters: the live counters behind TransferEngine::getMetrics() (ferry/metrics.h).
//
// The data path counts into atomics, never taking a lock or allocating: a task resolves its
// SeriesCounters (one per transport and peer segment) when it is planned, and each completed
// slice then adds to that series with relaxed atomic increments. Series are created on first
// use under a lock (planning, not per slice) and live as long as the EngineCounters, so a
// pointer to one stays valid; peers past `max_peers` per transport share one series (peer
// kOtherPeer), so their number is bounded. Snapshot() folds everything into plain values.
//
// Thread contract: thread-safe. Record* and the counters' increments are lock-free; Series,
// ForTransport and Snapshot take the registry's lock.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "ferry/metrics.h"
#include "ferry/types.h"

namespace ferry::engine {

// LatencyHistogram's buckets, counted with atomics.
class AtomicHistogram {
 public:
  // The bucket of a latency of `nanos` nanoseconds (rounded up to whole microseconds).
  static size_t BucketOf(uint64_t nanos);
  void Record(std::chrono::nanoseconds latency) {
    const uint64_t nanos = latency.count() > 0 ? static_cast<uint64_t>(latency.count()) : 0;
    buckets_[BucketOf(nanos)].fetch_add(1, std::memory_order_relaxed);
    sum_nanos_.fetch_add(nanos, std::memory_order_relaxed);
  }
  LatencyHistogram Read() const;

 private:
  std::array<std::atomic<uint64_t>, LatencyHistogram::kBuckets> buckets_{};
  std::atomic<uint64_t> sum_nanos_{0};
};

// One (transport, peer) series. The increments are relaxed: a snapshot may see one counter of
// a slice before another, never a torn value.
struct SeriesCounters {
  SeriesCounters(std::string transport_name, std::string peer_name)
      : transport(std::move(transport_name)), peer(std::move(peer_name)) {}

  // A slice completed: OK (its bytes counted by direction) or not.
  void RecordSlice(OpCode op, uint64_t length, bool ok) {
    if (ok) {
      bytes[op == OpCode::kRead ? 0 : 1].fetch_add(length, std::memory_order_relaxed);
      slices_ok.fetch_add(1, std::memory_order_relaxed);
    } else {
      slices_failed.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // A task ended: COMPLETED (code kOk, with its latency) or otherwise with `code`.
  void RecordTaskEnd(StatusCode code, std::chrono::nanoseconds took) {
    if (code == StatusCode::kOk) {
      completed.fetch_add(1, std::memory_order_relaxed);
      latency.Record(took);
    } else {
      failed[static_cast<size_t>(code)].fetch_add(1, std::memory_order_relaxed);
    }
  }
  TransferSeries Read() const;

  const std::string transport;
  const std::string peer;
  std::array<std::atomic<uint64_t>, 2> bytes{};  // [0] read, [1] write
  // in flight = handed - ok - failed (read handed last, and clamped at 0: the three are read
  // one by one). OK slices are counted by themselves, never as a difference of two counters
  // read apart, so that TransferSeries::slices never goes down between two snapshots.
  std::atomic<uint64_t> slices_handed{0};
  std::atomic<uint64_t> slices_ok{0};
  std::atomic<uint64_t> slices_failed{0};
  std::atomic<uint64_t> completed{0};
  std::array<std::atomic<uint64_t>, kStatusCodeCount> failed{};
  std::atomic<uint64_t> retries{0};
  std::atomic<uint64_t> fallbacks{0};
  std::atomic<uint64_t> stale_refreshes{0};
  AtomicHistogram latency;
};

// One installed transport's registrations.
struct TransportCounters {
  explicit TransportCounters(std::string transport_name) : name(std::move(transport_name)) {}
  void RecordRegistration(uint64_t length, bool ok, std::chrono::nanoseconds took) {
    (ok ? registrations : registration_failures).fetch_add(1, std::memory_order_relaxed);
    if (ok) registered_bytes.fetch_add(length, std::memory_order_relaxed);
    registration_nanos.fetch_add(static_cast<uint64_t>(std::max<int64_t>(took.count(), 0)),
                                 std::memory_order_relaxed);
  }

  const std::string name;
  std::atomic<uint64_t> registrations{0};
  std::atomic<uint64_t> registration_failures{0};
  std::atomic<uint64_t> registered_bytes{0};
  std::atomic<uint64_t> unregistrations{0};
  std::atomic<uint64_t> registration_nanos{0};
};

// Metadata-store calls, by kind.
enum class StoreOp : uint8_t { kGet = 0, kPut, kDelete, kDeleteIf, kList };
inline constexpr size_t kStoreOpCount = 5;
std::string_view StoreOpName(StoreOp op);

struct StoreOpCounters {
  void Record(StatusCode code, std::chrono::nanoseconds took) {
    count.fetch_add(1, std::memory_order_relaxed);
    if (code == StatusCode::kNotFound) {
      not_found.fetch_add(1, std::memory_order_relaxed);
    } else if (code != StatusCode::kOk) {
      errors.fetch_add(1, std::memory_order_relaxed);
    }
    latency.Record(took);
  }
  std::atomic<uint64_t> count{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> not_found{0};
  AtomicHistogram latency;
};

struct NotificationCounters {
  std::atomic<uint64_t> sent{0};
  std::atomic<uint64_t> send_failures{0};
  std::atomic<uint64_t> received{0};
  // refused: NotificationBox::refused() (the box counts what it turns away).
};

class EngineCounters {
 public:
  // `max_peers` > 0: peers with a series of their own, per transport.
  explicit EngineCounters(size_t max_peers) : max_peers_(max_peers) {}
  EngineCounters(const EngineCounters&) = delete;
  EngineCounters& operator=(const EngineCounters&) = delete;

  // The series of (`transport`, `peer`), made on first use; the transport's kOtherPeer series
  // once it has max_peers others. Never null; valid for this object's life.
  SeriesCounters* Series(std::string_view transport, std::string_view peer) EXCLUDES(mu_);
  // The counters of transport `name`, made on first use (in this order in snapshots). Never
  // null; valid for this object's life.
  TransportCounters* ForTransport(std::string_view name) EXCLUDES(mu_);
  StoreOpCounters& store_op(StoreOp op) { return store_ops_[static_cast<size_t>(op)]; }
  NotificationCounters& notifications() { return notifications_; }

  // Everything but EngineMetrics::segment, incarnation, metadata.store and the transports'
  // own counters, which the engine fills in.
  EngineMetrics Snapshot() const EXCLUDES(mu_);

 private:
  const size_t max_peers_;
  mutable Mutex mu_;
  // transport -> peer -> series; kOtherPeer's series counts towards no cap.
  using PeerSeries = std::map<std::string, std::unique_ptr<SeriesCounters>, std::less<>>;
  std::map<std::string, PeerSeries, std::less<>> series_ GUARDED_BY(mu_);
  std::vector<std::unique_ptr<TransportCounters>> transports_ GUARDED_BY(mu_);
  std::array<StoreOpCounters, kStoreOpCount> store_ops_;
  NotificationCounters notifications_;
};

}  // namespace ferry::engine
