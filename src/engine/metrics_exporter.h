// MetricsExporter: the optional Prometheus endpoint (EngineOptions::metrics_port). It serves
// GET /metrics in Prometheus' text format through prometheus-cpp (its pull library's Exposer,
// its TextSerializer), building the metric families from an EngineMetrics snapshot taken at
// each scrape: the data path never touches prometheus-cpp.
//
// Metric names (labels in braces; every counter ends in _total):
//   ferry_engine_info{segment,incarnation}                      gauge, 1
//   ferry_transfer_bytes_total{transport,peer,op}                op: read | write
//   ferry_transfer_slices_total{transport,peer}
//   ferry_transfer_operations_total{transport,peer}             tasks ended, however
//   ferry_transfer_failures_total{transport,peer,reason}        reason: a StatusCode name
//   ferry_transfer_retries_total / _fallbacks_total / _stale_refreshes_total{transport,peer}
//   ferry_transfer_in_flight_slices{transport,peer}             gauge
//   ferry_transfer_latency_seconds{transport,peer}              histogram, COMPLETED tasks
//   ferry_registrations_total / ferry_registration_failures_total / ferry_registered_bytes_total
//     / ferry_unregistrations_total / ferry_registration_seconds_total{transport}
//   ferry_transport_events_total{transport,event}               a transport's own counters
//   ferry_metadata_operations_total / _errors_total / _not_found_total{store,op}
//   ferry_metadata_latency_seconds{store,op}                    histogram
//   ferry_notifications_sent_total / ferry_notification_send_failures_total /
//     ferry_notifications_received_total / ferry_notifications_refused_total
//
// Thread contract: Start and the destructor from one thread; `source` runs on the exporter's
// HTTP threads, concurrently with anything, until the destructor returns.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ferry/metrics.h"
#include "ferry/status.h"

namespace prometheus {
class Exposer;
class Collectable;
}  // namespace prometheus

namespace ferry::engine {

// The snapshot as Prometheus' text exposition format (what GET /metrics answers).
std::string PrometheusText(const EngineMetrics& metrics);

class MetricsExporter {
 public:
  using Source = std::function<EngineMetrics()>;

  // Listens on host:port (port 0: a free one). Unavailable naming the address when it cannot.
  static Result<std::unique_ptr<MetricsExporter>> Start(const std::string& host, uint16_t port,
                                                        Source source);
  // Stops serving; `source` is not running and will not run again once it returns. Takes
  // milliseconds (see the .cc: civetweb would take up to 2 s).
  ~MetricsExporter();
  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;

  uint16_t port() const { return port_; }

 private:
  MetricsExporter() = default;

  std::shared_ptr<prometheus::Collectable> collectable_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::string host_;
  uint16_t port_ = 0;
};

}  // namespace ferry::engine
