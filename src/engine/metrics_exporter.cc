#include "engine/metrics_exporter.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <exception>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"

namespace ferry::engine {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

// Families by name, in the order first added.
class Families {
 public:
  MetricFamily& Family(const std::string& name, const std::string& help, MetricType type) {
    for (MetricFamily& f : out_) {
      if (f.name == name) return f;
    }
    out_.push_back(MetricFamily{name, help, type, {}});
    return out_.back();
  }
  void Counter(const std::string& name, const std::string& help, Labels labels, double value) {
    ClientMetric m;
    m.label = std::move(labels);
    m.counter.value = value;
    Family(name, help, MetricType::Counter).metric.push_back(std::move(m));
  }
  void Gauge(const std::string& name, const std::string& help, Labels labels, double value) {
    ClientMetric m;
    m.label = std::move(labels);
    m.gauge.value = value;
    Family(name, help, MetricType::Gauge).metric.push_back(std::move(m));
  }
  void Histogram(const std::string& name, const std::string& help, Labels labels,
                 const LatencyHistogram& h) {
    ClientMetric m;
    m.label = std::move(labels);
    m.histogram.sample_count = h.count;
    m.histogram.sample_sum = h.sum_seconds;
    uint64_t cumulative = 0;
    for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
      cumulative += h.buckets[i];
      m.histogram.bucket.push_back({cumulative, LatencyHistogram::UpperBoundSeconds(i)});
    }
    Family(name, help, MetricType::Histogram).metric.push_back(std::move(m));
  }
  std::vector<MetricFamily> Take() { return std::move(out_); }

 private:
  std::vector<MetricFamily> out_;
};

double D(uint64_t v) { return static_cast<double>(v); }

std::vector<MetricFamily> ToFamilies(const EngineMetrics& m) {
  Families f;
  f.Gauge("ferry_engine_info", "This engine: its segment name and incarnation (value 1)",
          {{"segment", m.segment}, {"incarnation", std::to_string(m.incarnation)}}, 1);
  for (const TransferSeries& s : m.transfers) {
    const Labels tp = {{"transport", s.transport}, {"peer", s.peer}};
    auto with = [&](std::string name, std::string value) {
      Labels l = tp;
      l.push_back({std::move(name), std::move(value)});
      return l;
    };
    const std::string bytes_help =
        "Bytes of slices a transport completed, by direction (retried slices count again)";
    f.Counter("ferry_transfer_bytes_total", bytes_help, with("op", "read"), D(s.bytes_read));
    f.Counter("ferry_transfer_bytes_total", bytes_help, with("op", "write"), D(s.bytes_written));
    f.Counter("ferry_transfer_slices_total", "Slices a transport completed OK", tp, D(s.slices));
    f.Counter("ferry_transfer_operations_total", "Transfer tasks ended (completed or not)", tp,
              D(s.operations()));
    for (size_t i = 0; i < kStatusCodeCount; ++i) {
      if (s.failed[i] == 0) continue;
      f.Counter("ferry_transfer_failures_total",
                "Transfer tasks that did not complete, by reason (a StatusCode name)",
                with("reason", std::string(StatusCodeName(static_cast<StatusCode>(i)))),
                D(s.failed[i]));
    }
    f.Counter("ferry_transfer_retries_total",
              "Attempts after the first (a reconnect or another transport)", tp, D(s.retries));
    f.Counter("ferry_transfer_fallbacks_total", "Retries that could take another transport", tp,
              D(s.fallbacks));
    f.Counter("ferry_transfer_stale_refreshes_total",
              "STALE answers: the peer's descriptor was refreshed and the task failed", tp,
              D(s.stale_refreshes));
    f.Gauge("ferry_transfer_in_flight_slices",
            "Slices handed to the transport and not yet completed", tp, D(s.in_flight));
    f.Histogram("ferry_transfer_latency_seconds",
                "Latency of completed transfer tasks, from submission to completion", tp,
                s.latency);
  }
  for (const TransportMetrics& t : m.transports) {
    const Labels tl = {{"transport", t.name}};
    f.Counter("ferry_registrations_total", "Memory regions registered with the transport", tl,
              D(t.registrations));
    f.Counter("ferry_registration_failures_total", "Registrations the transport refused", tl,
              D(t.registration_failures));
    f.Counter("ferry_registered_bytes_total", "Bytes of the regions registered", tl,
              D(t.registered_bytes));
    f.Counter("ferry_unregistrations_total", "Memory regions unregistered from the transport", tl,
              D(t.unregistrations));
    f.Counter("ferry_registration_seconds_total", "Time spent registering memory", tl,
              t.registration_seconds);
    for (const auto& [event, value] : t.counters) {
      f.Counter("ferry_transport_events_total", "The transport's own counters, by event",
                {{"transport", t.name}, {"event", event}}, D(value));
    }
  }
  for (const MetadataOpMetrics& op : m.metadata.ops) {
    const Labels ol = {{"store", m.metadata.store}, {"op", op.op}};
    f.Counter("ferry_metadata_operations_total", "Metadata store calls", ol, D(op.count));
    f.Counter("ferry_metadata_errors_total", "Metadata store calls that failed (not NotFound)", ol,
              D(op.errors));
    f.Counter("ferry_metadata_not_found_total", "Metadata store calls answered NotFound", ol,
              D(op.not_found));
    f.Histogram("ferry_metadata_latency_seconds", "Latency of metadata store calls", ol,
                op.latency);
  }
  const NotificationMetrics& n = m.notifications;
  f.Counter("ferry_notifications_sent_total", "Notifications delivered to their target", {},
            D(n.sent));
  f.Counter("ferry_notification_send_failures_total",
            "Notifications the target refused or that were not delivered", {}, D(n.send_failures));
  f.Counter("ferry_notifications_received_total", "Notifications received and kept", {},
            D(n.received));
  f.Counter("ferry_notifications_refused_total",
            "Notifications refused: past max_pending_notifies or max_pending_notify_bytes", {},
            D(n.refused));
  return f.Take();
}

class SnapshotCollectable final : public prometheus::Collectable {
 public:
  explicit SnapshotCollectable(MetricsExporter::Source source) : source_(std::move(source)) {}
  std::vector<MetricFamily> Collect() const override { return ToFamilies(source_()); }

 private:
  const MetricsExporter::Source source_;
};

}  // namespace

std::string PrometheusText(const EngineMetrics& metrics) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, ToFamilies(metrics));
  return out.str();
}

Result<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(const std::string& host,
                                                                uint16_t port, Source source) {
  const bool v6 = host.find(':') != std::string::npos;
  const std::string address = (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  std::unique_ptr<MetricsExporter> exporter(new MetricsExporter());
  exporter->collectable_ = std::make_shared<SnapshotCollectable>(std::move(source));
  try {
    // civetweb (inside the Exposer) throws when it cannot listen; nothing leaves this room.
    exporter->exposer_ = std::make_unique<prometheus::Exposer>(address, 1);
  } catch (const std::exception& e) {
    return UnavailableError("metrics endpoint: cannot listen on " + address + ": " + e.what());
  }
  exporter->exposer_->RegisterCollectable(exporter->collectable_);
  const std::vector<int> ports = exporter->exposer_->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0 || ports.front() > 65535) {
    return UnavailableError("metrics endpoint: listening on " + address + " gave no port");
  }
  exporter->port_ = static_cast<uint16_t>(ports.front());
  exporter->host_ = host;
  FERRY_LOG(kInfo) << "metrics endpoint: http://" << (v6 ? "[" + host + "]" : host) << ":"
                   << exporter->port_ << "/metrics";
  return exporter;
}

namespace {

// Connects to 127.0.0.1 / ::1 (for a wildcard host) or `host` at `port` and closes at once.
// Returns whether to knock again: false when `host` is not an IP literal, and false once the
// connection is refused, i.e. the endpoint no longer listens (its listener left its poll loop,
// which is what the knocks are for; knocking on would only reach whoever takes the port next).
// The connect is bounded by SO_SNDTIMEO (a local listener answers at once).
bool Knock(const std::string& host, uint16_t port) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  const bool v6 = host.find(':') != std::string::npos;
  const std::string target = host == "0.0.0.0" ? "127.0.0.1" : (host == "::" ? "::1" : host);
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&addr);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    if (inet_pton(AF_INET6, target.c_str(), &a->sin6_addr) != 1) return false;
    len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&addr);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    if (inet_pton(AF_INET, target.c_str(), &a->sin_addr) != 1) return false;
    len = sizeof(*a);
  }
  const int fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;
  const timeval bound{.tv_sec = 0, .tv_usec = 200'000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof(bound));
  const int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), len);
  const bool refused = rc != 0 && errno == ECONNREFUSED;
  ::close(fd);
  return !refused;
}

}  // namespace

MetricsExporter::~MetricsExporter() {
  // civetweb's listener thread polls its sockets in 2 s rounds and looks at its stop flag only
  // between them, so stopping it would take up to 2 s. While the Exposer stops, a thread
  // connects to the endpoint every few milliseconds: each connection ends the listener's poll,
  // which then sees the flag and closes the listening socket. Bounded: it stops at the first
  // refused connection (the listener is gone) or once the Exposer is gone, whichever is first.
  std::atomic<bool> stopped{false};
  std::thread knocker([this, &stopped] {
    while (!stopped.load() && Knock(host_, port_)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  exposer_.reset();
  stopped.store(true);
  knocker.join();
}

}  // namespace ferry::engine
