// Reading Prometheus' text exposition format (version 0.0.4, what prometheus-cpp serves and
// `ferry stats` fetches), generically: every sample with its family, labels and value.
//
//   # HELP ferry_transfer_bytes_total Bytes moved.
//   # TYPE ferry_transfer_bytes_total counter
//   ferry_transfer_bytes_total{transport="tcp",peer="b"} 4096
//
// A sample belongs to the family a "# TYPE" line declared under its name, or under its name
// less a _bucket, _sum, _count, _total or _created suffix; a sample no TYPE line covers is its
// own family, of type "untyped". Other comments and blank lines are skipped.
//
// Thread contract: pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ferry/status.h"

namespace ferry::cli {

struct PromSample {
  std::string family;  // the TYPE'd name this sample belongs to
  std::string type;    // counter | gauge | histogram | summary | untyped
  std::string name;    // the sample's own name (family plus a suffix, for histograms)
  std::vector<std::pair<std::string, std::string>> labels;  // in the order written, unescaped
  double value = 0;                                         // NaN, +Inf and -Inf included
};

inline constexpr size_t kMaxExpositionBytes = size_t{32} << 20;

// Parses a whole exposition. Errors: InvalidArgument naming the line ("line 7: label value
// not terminated"): a malformed sample, label set, value or TYPE line, or input over
// kMaxExpositionBytes. No partial result.
Result<std::vector<PromSample>> ParsePrometheusText(std::string_view text);

// `labels` as written in the exposition, without braces: a="x",b="y" (values re-escaped).
std::string FormatLabels(const std::vector<std::pair<std::string, std::string>>& labels);

}  // namespace ferry::cli
