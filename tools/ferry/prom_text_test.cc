// The exposition parser `ferry stats` reads engines' metrics with, and its tables.
#include "prom_text.h"

#include <gtest/gtest.h>

#include <cmath>

#include "text_table.h"

namespace ferry::cli {
namespace {

TEST(PromTextTest, ReadsFamiliesLabelsAndValues) {
  const std::string text = R"(# HELP ferry_bytes_total Bytes moved.
# TYPE ferry_bytes_total counter
ferry_bytes_total{transport="tcp",peer="seg-b"} 4096
ferry_bytes_total{transport="shm",peer="a \"quoted\\ name\nx"} 1.5e3 1700000000000
# TYPE ferry_latency_seconds histogram
ferry_latency_seconds_bucket{le="0.001"} 3
ferry_latency_seconds_bucket{le="+Inf"} 4
ferry_latency_seconds_sum 0.25
ferry_latency_seconds_count 4
# a comment

ferry_untyped_thing -Inf
ferry_gauge{a="1",} NaN
ferry_written_by_prometheus_cpp Nan
)";
  Result<std::vector<PromSample>> samples = ParsePrometheusText(text);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 9u);
  const PromSample& first = (*samples)[0];
  EXPECT_EQ(first.family, "ferry_bytes_total");
  EXPECT_EQ(first.type, "counter");
  ASSERT_EQ(first.labels.size(), 2u);
  EXPECT_EQ(first.labels[1].first, "peer");
  EXPECT_EQ(first.labels[1].second, "seg-b");
  EXPECT_EQ(first.value, 4096);
  EXPECT_EQ((*samples)[1].labels[1].second, "a \"quoted\\ name\nx");
  EXPECT_EQ((*samples)[1].value, 1500);
  EXPECT_EQ(FormatLabels((*samples)[1].labels),
            "transport=\"shm\",peer=\"a \\\"quoted\\\\ name\\nx\"");
  EXPECT_EQ((*samples)[2].family, "ferry_latency_seconds");
  EXPECT_EQ((*samples)[2].type, "histogram");
  EXPECT_EQ((*samples)[2].name, "ferry_latency_seconds_bucket");
  EXPECT_EQ((*samples)[3].labels[0].second, "+Inf");
  EXPECT_EQ((*samples)[3].value, 4);
  EXPECT_EQ((*samples)[5].family, "ferry_latency_seconds");
  EXPECT_EQ((*samples)[6].type, "untyped");
  EXPECT_TRUE(std::isinf((*samples)[6].value) && (*samples)[6].value < 0);
  EXPECT_TRUE(std::isnan((*samples)[7].value));
  EXPECT_TRUE(std::isnan((*samples)[8].value));
}

TEST(PromTextTest, RefusesMalformedLinesNamingThem) {
  const std::pair<const char*, const char*> cases[] = {
      {"ok 1\nbad{x=\"1\" 2\n", "line 2"},
      {"m{x=1} 2\n", "no quoted value"},
      {"m{x=\"1} 2\n", "not terminated"},
      {"m 1 2 3\n", "bad timestamp"},
      {"m abc\n", "bad value 'abc'"},
      {"m\n", "bad value ''"},
      {"# TYPE m flavour\n", "unknown type 'flavour'"},
      {"{x=\"1\"} 2\n", "expected a metric name"},
      {"m{x=\"\\q\"} 2\n", "unknown escape"},
  };
  for (const auto& [text, want] : cases) {
    Result<std::vector<PromSample>> samples = ParsePrometheusText(text);
    ASSERT_FALSE(samples.ok()) << text;
    EXPECT_EQ(samples.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_NE(samples.status().message().find(want), std::string::npos)
        << text << " -> " << samples.status();
  }
  EXPECT_FALSE(ParsePrometheusText(std::string(kMaxExpositionBytes + 1, '#')).ok());
  // Overflow is refused; an underflow reads as the nearest value, as Prometheus reads it.
  EXPECT_FALSE(ParsePrometheusText("m 1e400\n").ok());
  Result<std::vector<PromSample>> tiny = ParsePrometheusText("m 1e-400\nn 4.9e-324\n");
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ((*tiny)[0].value, 0);
  EXPECT_GT((*tiny)[1].value, 0);
}

TEST(TextTableTest, AlignsColumnsAndFormatsBytes) {
  TextTable table({"NAME", "BYTES"});
  table.AddRow({"a-long-name", "1"});
  table.AddRow({"b"});
  EXPECT_EQ(table.Render(), "NAME         BYTES\na-long-name  1\nb\n");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(4096), "4.0 KiB");
  EXPECT_EQ(HumanBytes(uint64_t{3} << 29), "1.5 GiB");
}

TEST(TextTableTest, ControlCharactersFromAStoreArePrintedEscaped) {
  // A segment name or message taken from a store or a peer cannot drive the terminal.
  EXPECT_EQ(Printable("kv\x1b[2J\r\n\x7f-\xc3\xa9"), "kv\\x1b[2J\\x0d\\x0a\\x7f-\xc3\xa9");
  EXPECT_EQ(Printable(std::string("a\0b", 3)), "a\\x00b");
  TextTable table({"NAME", "N"});
  table.AddRow({"x\ty", "1"});
  EXPECT_EQ(table.Render(), "NAME    N\nx\\x09y  1\n");
}

}  // namespace
}  // namespace ferry::cli
