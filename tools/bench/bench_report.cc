#include "bench/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ferry::bench {
namespace {

// The JSON string literal for `text` (quotes, backslashes and control bytes escaped).
std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string JoinTransports(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::string out;
  for (const std::string& name : names) {
    if (name.empty()) continue;
    out += (out.empty() ? "" : "+") + name;
  }
  return out;
}

double Percentile(std::vector<double>& samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(samples.size()));
  const size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return samples[std::min(index, samples.size() - 1)];
}

std::string FormatJson(const BenchOptions& o, const BenchResult& r) {
  char numbers[768];
  std::snprintf(
      numbers, sizeof(numbers),
      "\"block_size\":%llu,\"batch_size\":%llu,\"threads\":%llu,\"inflight\":%llu,"
      "\"working_set\":%llu,\"bytes\":%llu,\"seconds\":%.6f,\"gbps\":%.6f,"
      "\"ops_per_s\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"mean_us\":%.1f,"
      "\"errors\":%llu,\"retries\":%llu,\"fallbacks\":%llu,\"stale_refreshes\":%llu,"
      "\"task_failures\":%llu",
      static_cast<unsigned long long>(o.block_size), static_cast<unsigned long long>(o.batch_size),
      static_cast<unsigned long long>(o.threads), static_cast<unsigned long long>(o.inflight),
      static_cast<unsigned long long>(r.working_set), static_cast<unsigned long long>(r.bytes),
      r.seconds, r.Gbps(), r.OpsPerSecond(), r.p50_us, r.p99_us, r.mean_us,
      static_cast<unsigned long long>(r.errors), static_cast<unsigned long long>(r.retries),
      static_cast<unsigned long long>(r.fallbacks),
      static_cast<unsigned long long>(r.stale_refreshes),
      static_cast<unsigned long long>(r.task_failures));
  return "{\"operation\":" + JsonString(std::string(OperationName(o.operation))) +
         ",\"protocol\":" + JsonString(o.protocol) + ",\"transport\":" + JsonString(r.transport) +
         ",\"target\":" + (r.target_is_file ? "\"file\"" : "\"memory\"") +
         ",\"file_io\":" + JsonString(r.file_io) + "," + numbers + "}";
}

std::string FormatSummary(const BenchOptions& o, const BenchResult& r) {
  char line[512];
  std::snprintf(line, sizeof(line),
                "%s over %s (carried by %s): block %llu B, batch %llu, %llu in flight, "
                "%llu thread(s), %.2f s\n"
                "  %.3f GB/s, %.0f ops/s, batch latency p50 %.1f us, p99 %.1f us, mean %.1f us, "
                "%llu error(s)",
                std::string(OperationName(o.operation)).c_str(), o.protocol.c_str(),
                r.transport.empty() ? "-" : r.transport.c_str(),
                static_cast<unsigned long long>(o.block_size),
                static_cast<unsigned long long>(o.batch_size),
                static_cast<unsigned long long>(o.inflight),
                static_cast<unsigned long long>(o.threads), r.seconds, r.Gbps(), r.OpsPerSecond(),
                r.p50_us, r.p99_us, r.mean_us, static_cast<unsigned long long>(r.errors));
  std::string out = line;
  if (r.target_is_file) {
    out += "\n  target: a file buffer, I/O " + (r.file_io.empty() ? "-" : r.file_io);
  }
  if (!r.first_error.empty()) out += "\n  first error: " + r.first_error;
  return out;
}

std::string CsvHeader() {
  return "protocol,operation,block_size,threads,batch_size,inflight,gbps,ops_per_s,p50_us,"
         "p99_us,raw_baseline,raw_gbps,raw_p99_us,ratio,transport,errors";
}

std::string FormatCsvRow(const BenchOptions& o, const BenchResult& r, const RawPoint& raw) {
  char ferry[320];
  std::snprintf(
      ferry, sizeof(ferry), "%s,%s,%llu,%llu,%llu,%llu,%.6f,%.1f,%.1f,%.1f,", o.protocol.c_str(),
      std::string(OperationName(o.operation)).c_str(),
      static_cast<unsigned long long>(o.block_size), static_cast<unsigned long long>(o.threads),
      static_cast<unsigned long long>(o.batch_size), static_cast<unsigned long long>(o.inflight),
      r.Gbps(), r.OpsPerSecond(), r.p50_us, r.p99_us);
  char baseline[160] = ",,,";
  if (!raw.baseline.empty()) {
    char p99[32] = "";
    if (raw.p99_us > 0) std::snprintf(p99, sizeof(p99), "%.1f", raw.p99_us);
    char ratio[32] = "";
    if (raw.gbps > 0) std::snprintf(ratio, sizeof(ratio), "%.4f", r.Gbps() / raw.gbps);
    std::snprintf(baseline, sizeof(baseline), "%s,%.6f,%s,%s", raw.baseline.c_str(), raw.gbps, p99,
                  ratio);
  }
  return std::string(ferry) + baseline + "," + r.transport + "," + std::to_string(r.errors);
}

}  // namespace ferry::bench
