// EngineMetrics: what a TransferEngine has done since init(), as one plain snapshot
// (TransferEngine::getMetrics()). The same figures are what the optional Prometheus endpoint
// (EngineOptions::metrics_port) serves, read from a snapshot at scrape time.
//
//   ferry::EngineMetrics m = engine.getMetrics();
//   for (const ferry::TransferSeries& s : m.transfers) {
//     std::cout << s.transport << " -> " << s.peer << ": " << s.bytes() << " bytes\n";
//   }
//
// Every counter only grows for the engine's life (a gauge says so where it is one), so two
// snapshots subtract. Counting costs the data path no lock and no allocation: each completed
// slice adds to atomic counters of a series resolved when its task was planned.
//
// Labels stay bounded: a series is one (transport, peer segment); peers past
// EngineOptions::metrics_max_peers (per transport) are counted together in one series whose
// peer is kOtherPeer.
//
// Thread contract: value types; distinct objects may be used from distinct threads freely.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/status.h"

namespace ferry {

// How many StatusCode values there are (failure counters are indexed by code).
inline constexpr size_t kStatusCodeCount = static_cast<size_t>(StatusCode::kInternal) + 1;

// The peer label of the series that folds peers past EngineOptions::metrics_max_peers.
inline constexpr std::string_view kOtherPeer = "other";
// The transport label of tasks that ended before a transport was chosen (the segment could not
// be fetched, no transport reaches it, a bad range...).
inline constexpr std::string_view kNoTransport = "none";

// A latency histogram with fixed log2 buckets: bucket i (i < kBuckets - 1) counts observations
// in (UpperBoundSeconds(i - 1), UpperBoundSeconds(i)] with UpperBoundSeconds(i) = 2^i
// microseconds (1 us .. 2^25 us, about 33.6 s); the last bucket counts everything above.
// Counts are per bucket, not cumulative.
struct LatencyHistogram {
  static constexpr size_t kBuckets = 27;
  std::array<uint64_t, kBuckets> buckets{};
  uint64_t count = 0;        // observations (the sum of buckets)
  double sum_seconds = 0.0;  // their total

  // The inclusive upper bound of bucket i in seconds; +infinity for the last bucket.
  static double UpperBoundSeconds(size_t i);
  // The smallest bucket bound below which at least `q` (0..1) of the observations lie; 0 when
  // empty (an estimate: the answer is a bucket bound).
  double QuantileSeconds(double q) const;
};

// One (transport, peer segment) of this engine's transfers, as the initiator.
struct TransferSeries {
  std::string transport;  // "tcp", "shm", "cxl", "rdma", ...; kNoTransport: see there
  std::string peer;       // the peer segment's name; kOtherPeer: peers past the cap
  // Bytes of slices a transport completed OK, by direction (a retried request's slices count
  // again: these are bytes carried, TransferStatus::transferred_bytes is bytes confirmed).
  uint64_t bytes_written = 0;
  uint64_t bytes_read = 0;
  uint64_t slices = 0;     // slices completed OK
  uint64_t completed = 0;  // tasks that ended COMPLETED
  // Tasks that ended otherwise, indexed by their reason's StatusCode (TIMEOUT: kTimeout,
  // CANCELED: kCanceled, a refused or stale target: its code, ...).
  std::array<uint64_t, kStatusCodeCount> failed{};
  uint64_t retries = 0;          // attempts after the first (a reconnect or another transport)
  uint64_t fallbacks = 0;        // retries that could take another transport
  uint64_t stale_refreshes = 0;  // STALE answers: the descriptor was refreshed, the task failed
  uint64_t in_flight = 0;        // gauge: slices handed to the transport and not yet completed
  LatencyHistogram latency;      // of COMPLETED tasks, from submitTransfer to the end

  uint64_t bytes() const { return bytes_written + bytes_read; }
  uint64_t failures() const;  // the sum of failed[]
  uint64_t failures(StatusCode code) const { return failed[static_cast<size_t>(code)]; }
  uint64_t operations() const { return completed + failures(); }  // tasks ended
};

// One installed transport: its registrations, and counters of its own.
struct TransportMetrics {
  std::string name;
  uint64_t registrations = 0;          // regions registered with it OK
  uint64_t registration_failures = 0;  // refused (NotFound "cannot reach this memory" is not one)
  uint64_t registered_bytes = 0;       // bytes of those regions (not reduced by unregistration)
  uint64_t unregistrations = 0;
  double registration_seconds = 0.0;  // time spent in its RegisterMemory calls
  // The transport's own counters (tcp: connections_opened, bad_frames, ...), name -> value, each
  // only growing; empty for a transport that keeps none.
  std::vector<std::pair<std::string, uint64_t>> counters;
};

// One kind of metadata-store call ("get", "put", "delete", "delete_if", "list").
struct MetadataOpMetrics {
  std::string op;
  uint64_t count = 0;
  uint64_t errors = 0;     // ended with an error other than NotFound
  uint64_t not_found = 0;  // answered NotFound (an answer, not an error)
  LatencyHistogram latency;
};

struct MetadataMetrics {
  std::string store;  // the store's scheme: "etcd", "redis", "http", "p2p", "memory"
  std::vector<MetadataOpMetrics> ops;
};

struct NotificationMetrics {
  uint64_t sent = 0;           // sendNotify (and notifications after batches) delivered
  uint64_t send_failures = 0;  // ... refused by the target or not delivered
  uint64_t received = 0;       // kept for getNotifies
  uint64_t refused = 0;        // refused: past max_pending_notifies / max_pending_notify_bytes
};

struct EngineMetrics {
  std::string segment;  // this engine's segment name
  uint64_t incarnation = 0;
  // One per (transport, peer) this engine planned a task for, sorted by transport then peer.
  std::vector<TransferSeries> transfers;
  std::vector<TransportMetrics> transports;  // the installed transports, in priority order
  MetadataMetrics metadata;
  NotificationMetrics notifications;

  // The sum of `transfers` whose transport is `transport` (empty: all), with transport and peer
  // set to what was summed ("" for "all").
  TransferSeries Total(std::string_view transport = {}) const;
  // The series of (transport, peer); nullptr when there is none.
  const TransferSeries* Find(std::string_view transport, std::string_view peer) const;
};

}  // namespace ferry
