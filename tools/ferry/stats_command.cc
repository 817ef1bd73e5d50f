// `ferry stats` (commands.h): fetches a running engine's Prometheus endpoint (the engine's
// metrics port, FERRY_METRICS_PORT) and prints its samples as a table, family by family.
// The exposition is read generically (prom_text.h), so the table follows whatever the engine
// exports. Histogram buckets are left out unless --buckets (their _count and _sum stay).
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "common/host_port.h"
#include "prom_text.h"
#include "store_access.h"
#include "text_table.h"

namespace ferry::cli {
namespace {

struct MetricsUrl {
  HostPort server;
  std::string path = "/metrics";
};

// "http://h:p[/path]" or "h:p[/path]"; the path defaults to /metrics.
Result<MetricsUrl> ParseMetricsUrl(std::string_view text) {
  std::string_view rest = text;
  if (rest.starts_with("https://")) {
    return InvalidArgumentError("'" + std::string(text) +
                                "': https is not supported; the "
                                "engine's metrics endpoint speaks plain http");
  }
  if (rest.starts_with("http://")) rest.remove_prefix(7);
  MetricsUrl url;
  const size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    url.path = std::string(rest.substr(slash));
    rest = rest.substr(0, slash);
  }
  Result<HostPort> server = ParseHostPort(rest, "metrics endpoint (http://HOST:PORT[/metrics])");
  if (!server.ok()) return server.status();
  url.server = std::move(*server);
  return url;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char text[48];
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    std::snprintf(text, sizeof(text), "%.0f", value);
  } else {
    std::snprintf(text, sizeof(text), "%.6g", value);
  }
  return text;
}

}  // namespace

int RunStats(const std::string& endpoint, const StatsFlags& flags) {
  Result<MetricsUrl> url = ParseMetricsUrl(endpoint);
  if (!url.ok()) return Fail(kExitUsage, "stats", url.status());

  httplib::Client client(url->server.host, url->server.port);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(flags.timeout);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(flags.timeout - seconds);
  client.set_connection_timeout(seconds.count(), micros.count());
  client.set_read_timeout(seconds.count(), micros.count());
  client.set_write_timeout(seconds.count(), micros.count());
  // The body is read through a receiver that stops at kMaxExpositionBytes, and at --timeout
  // after the request began: an endpoint that sends without end, or trickles a byte at a time
  // (each read within the read timeout), can neither grow this process without bound nor hold
  // it past --timeout plus one read.
  std::string body;
  bool too_big = false;
  bool too_slow = false;
  const auto deadline = std::chrono::steady_clock::now() + flags.timeout;
  httplib::Result reply = client.Get(
      url->path, [&body, &too_big, &too_slow, deadline](const char* data, size_t length) {
        if (body.size() + length > kMaxExpositionBytes) {
          too_big = true;
          return false;
        }
        if (std::chrono::steady_clock::now() > deadline) {
          too_slow = true;
          return false;
        }
        body.append(data, length);
        return true;
      });
  const std::string where = "metrics endpoint http://" + url->server.ToString() + url->path;
  if (too_big) {
    return Fail(kExitMalformed, where + ": more than " + std::to_string(kMaxExpositionBytes) +
                                    " bytes; not read further");
  }
  if (too_slow) {
    return Fail(kExitNoAnswer, where + ": the body did not arrive within --timeout=" +
                                   std::to_string(flags.timeout.count()) + " ms");
  }
  if (!reply) {
    return Fail(kExitNoAnswer, where + ": " + httplib::to_string(reply.error()));
  }
  if (reply->status != 200) {
    return Fail(kExitNoAnswer, where + ": HTTP status " + std::to_string(reply->status));
  }
  Result<std::vector<PromSample>> samples = ParsePrometheusText(body);
  if (!samples.ok()) return Fail(kExitMalformed, where + ": not Prometheus text", samples.status());

  TextTable table({"METRIC", "TYPE", "LABELS", "VALUE"});
  for (const PromSample& s : *samples) {
    if (!flags.filter.empty() && s.family.find(flags.filter) == std::string::npos) continue;
    if (!flags.buckets && s.type == "histogram" && s.name == s.family + "_bucket") continue;
    const std::string labels = FormatLabels(s.labels);
    table.AddRow({s.name, s.type, labels.empty() ? "-" : labels, FormatValue(s.value)});
  }
  std::fputs(table.Render().c_str(), stdout);
  return kExitOk;
}

}  // namespace ferry::cli
