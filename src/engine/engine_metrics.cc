#include "engine/engine_metrics.h"

#include <bit>
#include <cmath>
#include <limits>

namespace ferry {

// ---- ferry/metrics.h -----------------------------------------------------------------------

double LatencyHistogram::UpperBoundSeconds(size_t i) {
  if (i + 1 >= kBuckets) return std::numeric_limits<double>::infinity();
  return std::ldexp(1e-6, static_cast<int>(i));
}

double LatencyHistogram::QuantileSeconds(double q) const {
  if (count == 0) return 0.0;
  const double wanted = std::clamp(q, 0.0, 1.0) * static_cast<double>(count);
  uint64_t seen = 0;
  for (size_t i = 0; i < kBuckets; ++i) {
    seen += buckets[i];
    if (seen > 0 && static_cast<double>(seen) >= wanted) return UpperBoundSeconds(i);
  }
  return UpperBoundSeconds(kBuckets - 1);
}

uint64_t TransferSeries::failures() const {
  uint64_t sum = 0;
  for (uint64_t n : failed) sum += n;
  return sum;
}

namespace {

void Add(LatencyHistogram& into, const LatencyHistogram& from) {
  for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) into.buckets[i] += from.buckets[i];
  into.count += from.count;
  into.sum_seconds += from.sum_seconds;
}

}  // namespace

TransferSeries EngineMetrics::Total(std::string_view transport) const {
  TransferSeries total;
  total.transport = std::string(transport);
  for (const TransferSeries& s : transfers) {
    if (!transport.empty() && s.transport != transport) continue;
    total.bytes_written += s.bytes_written;
    total.bytes_read += s.bytes_read;
    total.slices += s.slices;
    total.completed += s.completed;
    for (size_t i = 0; i < kStatusCodeCount; ++i) total.failed[i] += s.failed[i];
    total.retries += s.retries;
    total.fallbacks += s.fallbacks;
    total.stale_refreshes += s.stale_refreshes;
    total.in_flight += s.in_flight;
    Add(total.latency, s.latency);
  }
  return total;
}

const TransferSeries* EngineMetrics::Find(std::string_view transport, std::string_view peer) const {
  for (const TransferSeries& s : transfers) {
    if (s.transport == transport && s.peer == peer) return &s;
  }
  return nullptr;
}

namespace engine {

namespace {

uint64_t Load(const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); }

}  // namespace

// ---- counters ------------------------------------------------------------------------------

size_t AtomicHistogram::BucketOf(uint64_t nanos) {
  const uint64_t micros = nanos / 1000 + (nanos % 1000 != 0 ? 1 : 0);
  // Bucket i holds (2^(i-1), 2^i] us: the smallest i with micros <= 2^i.
  const size_t i = micros <= 1 ? 0 : static_cast<size_t>(std::bit_width(micros - 1));
  return std::min(i, LatencyHistogram::kBuckets - 1);
}

LatencyHistogram AtomicHistogram::Read() const {
  LatencyHistogram out;
  for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
    out.buckets[i] = Load(buckets_[i]);
    out.count += out.buckets[i];
  }
  out.sum_seconds = static_cast<double>(Load(sum_nanos_)) * 1e-9;
  return out;
}

TransferSeries SeriesCounters::Read() const {
  TransferSeries out;
  out.transport = transport;
  out.peer = peer;
  // The completions before the hand-overs they follow (see slices_handed).
  out.slices = Load(slices_ok);
  const uint64_t done = out.slices + Load(slices_failed);
  const uint64_t handed = Load(slices_handed);
  out.in_flight = handed > done ? handed - done : 0;
  out.bytes_read = Load(bytes[0]);
  out.bytes_written = Load(bytes[1]);
  out.completed = Load(completed);
  for (size_t i = 0; i < kStatusCodeCount; ++i) out.failed[i] = Load(failed[i]);
  out.retries = Load(retries);
  out.fallbacks = Load(fallbacks);
  out.stale_refreshes = Load(stale_refreshes);
  out.latency = latency.Read();
  return out;
}

std::string_view StoreOpName(StoreOp op) {
  switch (op) {
    case StoreOp::kGet:
      return "get";
    case StoreOp::kPut:
      return "put";
    case StoreOp::kDelete:
      return "delete";
    case StoreOp::kDeleteIf:
      return "delete_if";
    case StoreOp::kList:
      return "list";
  }
  return "?";
}

SeriesCounters* EngineCounters::Series(std::string_view transport, std::string_view peer) {
  MutexLock lock(mu_);
  auto t = series_.find(transport);
  if (t == series_.end()) t = series_.emplace(std::string(transport), PeerSeries{}).first;
  PeerSeries& peers = t->second;
  if (auto it = peers.find(peer); it != peers.end()) return it->second.get();
  const bool other_exists = peers.find(kOtherPeer) != peers.end();
  const size_t own = peers.size() - (other_exists ? 1 : 0);
  const std::string_view name = own < max_peers_ ? peer : kOtherPeer;
  if (auto it = peers.find(name); it != peers.end()) return it->second.get();
  auto made = std::make_unique<SeriesCounters>(std::string(transport), std::string(name));
  SeriesCounters* out = made.get();
  peers.emplace(std::string(name), std::move(made));
  return out;
}

TransportCounters* EngineCounters::ForTransport(std::string_view name) {
  MutexLock lock(mu_);
  for (const auto& t : transports_) {
    if (t->name == name) return t.get();
  }
  transports_.push_back(std::make_unique<TransportCounters>(std::string(name)));
  return transports_.back().get();
}

EngineMetrics EngineCounters::Snapshot() const {
  EngineMetrics out;
  // The series are read after the lock is let go (they live as long as this object): a scrape
  // never holds up the planning of tasks for longer than copying the pointers.
  std::vector<const SeriesCounters*> series;
  {
    MutexLock lock(mu_);
    for (const auto& [transport, peers] : series_) {
      for (const auto& [peer, s] : peers) series.push_back(s.get());
    }
    for (const auto& t : transports_) {
      TransportMetrics m;
      m.name = t->name;
      m.registrations = Load(t->registrations);
      m.registration_failures = Load(t->registration_failures);
      m.registered_bytes = Load(t->registered_bytes);
      m.unregistrations = Load(t->unregistrations);
      m.registration_seconds = static_cast<double>(Load(t->registration_nanos)) * 1e-9;
      out.transports.push_back(std::move(m));
    }
  }
  out.transfers.reserve(series.size());
  for (const SeriesCounters* s : series) out.transfers.push_back(s->Read());
  for (size_t i = 0; i < kStoreOpCount; ++i) {
    const StoreOpCounters& c = store_ops_[i];
    MetadataOpMetrics op;
    op.op = std::string(StoreOpName(static_cast<StoreOp>(i)));
    op.count = Load(c.count);
    op.errors = Load(c.errors);
    op.not_found = Load(c.not_found);
    op.latency = c.latency.Read();
    out.metadata.ops.push_back(std::move(op));
  }
  out.notifications.sent = Load(notifications_.sent);
  out.notifications.send_failures = Load(notifications_.send_failures);
  out.notifications.received = Load(notifications_.received);
  return out;
}

}  // namespace engine
}  // namespace ferry
