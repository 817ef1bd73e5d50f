// ferry: the operator's command for a ferry cluster: lists and inspects the segments engines
// publish in the metadata store, probes engines, follows changes, and reads an engine's
// metrics. Flags are parsed by CLI11 (the one place its exceptions are caught); the work is in
// commands.h, which also lists the exit codes.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.h"
#include "common/tsan_suppressions.h"

// The store clients (etcd, http) and `stats` use cpp-httplib from several threads.
FERRY_TSAN_IGNORE_HTTPLIB()

namespace {

// The store flags of one subcommand, writing into `flags` and `timeout_ms`.
void AddStoreFlags(CLI::App* sub, ferry::cli::StoreFlags& flags, int& timeout_ms) {
  sub->add_option("--metadata_server,--metadata-server", flags.connection,
                  "the store the engines publish to: etcd://H:P[,H:P...], redis://[user:pass@]"
                  "H:P[/db] or http://H:P/metadata (P2PHANDSHAKE is not a store)")
      ->required();
  sub->add_option("--prefix", flags.prefix, "the engines' key prefix")->capture_default_str();
  sub->add_option("--timeout", timeout_ms, "bound on each store or RPC round trip, ms")
      ->capture_default_str()
      ->check(CLI::Range(1, 600000));
}

}  // namespace

int main(int argc, char** argv) {
  // In main only: a unity build compiles the other files of ferry-cli in this translation unit.
  using namespace ferry::cli;
  CLI::App app{
      "Inspects a ferry cluster: the segments its engines publish in the metadata store, their "
      "liveness, their changes, and an engine's metrics."};
  app.name("ferry");
  app.set_version_flag("--version", std::string("ferry ") + FERRY_VERSION_STRING);
  app.require_subcommand(1);
  app.footer(ExitCodesHelp());

  StoreFlags store;
  int timeout_ms = 3000;
  bool json = false;
  std::string segment;

  CLI::App* segments = app.add_subcommand(
      "segments", "list the segments: name, host, rpc endpoint, transports, buffers, bytes");
  AddStoreFlags(segments, store, timeout_ms);
  segments->add_flag("--json", json, "a JSON array instead of a table");

  CLI::App* show = app.add_subcommand(
      "show", "one segment: buffers, locations, transports, generation, incarnation, rpc");
  show->add_option("segment", segment, "the segment's name")->required();
  AddStoreFlags(show, store, timeout_ms);
  show->add_flag("--json", json, "the descriptor as published (schema v1) instead of a table");

  ProbeFlags probe;
  int probe_interval_ms = 1000;
  CLI::App* probe_cmd = app.add_subcommand(
      "probe",
      "ask the segment's engine over its RPC endpoint whether it is alive, and time it "
      "(FERRY_AUTH_SECRET: the cluster secret, when engines require one)");
  probe_cmd->add_option("segment", segment, "the segment's name")->required();
  AddStoreFlags(probe_cmd, store, timeout_ms);
  probe_cmd->add_option("--count", probe.count, "probes to send")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  probe_cmd->add_option("--interval", probe_interval_ms, "pause between probes, ms")
      ->capture_default_str()
      ->check(CLI::Range(0, 3600000));

  WatchFlags watch;
  double duration_s = 0;
  int watch_interval_ms = 1000;
  CLI::App* watch_cmd = app.add_subcommand(
      "watch",
      "follow segment changes live, one line each (the store's watch where it has one, "
      "else polling)");
  AddStoreFlags(watch_cmd, store, timeout_ms);
  watch_cmd->add_option("--duration", duration_s, "seconds to watch; 0: until SIGINT or SIGTERM")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e7))
      // CLI11 reads "nan" as a double and Range lets NaN through (no comparison is true).
      ->check([](const std::string& text) {
        return text.find_first_of("nN") == std::string::npos ? std::string()
                                                             : "not a number of seconds";
      });
  watch_cmd->add_option("--interval", watch_interval_ms, "polling period, ms")
      ->capture_default_str()
      ->check(CLI::Range(10, 3600000));
  watch_cmd->add_flag("--poll", watch.poll, "poll even where the store can watch");

  StatsFlags stats;
  std::string endpoint;
  int stats_timeout_ms = 3000;
  CLI::App* stats_cmd = app.add_subcommand(
      "stats", "a running engine's metrics (its Prometheus endpoint) as a table");
  stats_cmd->add_option("endpoint", endpoint, "http://HOST:PORT[/metrics] or HOST:PORT")
      ->required();
  stats_cmd->add_option("--filter", stats.filter, "only families whose name contains this");
  stats_cmd->add_flag("--buckets", stats.buckets, "include histogram buckets");
  stats_cmd->add_option("--timeout", stats_timeout_ms, "bound on the request, ms")
      ->capture_default_str()
      ->check(CLI::Range(1, 600000));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "ferry: %s\nRun 'ferry --help' or 'ferry COMMAND --help' for usage.\n",
                 e.what());
    return kExitUsage;
  }
  store.timeout = std::chrono::milliseconds(timeout_ms);

  int code = kExitUsage;  // require_subcommand(1) makes one of these run
  if (segments->parsed()) {
    code = RunSegments(store, json);
  } else if (show->parsed()) {
    code = RunShow(store, segment, json);
  } else if (probe_cmd->parsed()) {
    probe.interval = std::chrono::milliseconds(probe_interval_ms);
    code = RunProbe(store, segment, probe);
  } else if (watch_cmd->parsed()) {
    watch.duration = std::chrono::milliseconds(static_cast<int64_t>(duration_s * 1000));
    watch.interval = std::chrono::milliseconds(watch_interval_ms);
    code = RunWatch(store, watch);
  } else if (stats_cmd->parsed()) {
    stats.timeout = std::chrono::milliseconds(stats_timeout_ms);
    code = RunStats(endpoint, stats);
  }
  // Output that did not reach its file (a full disk, a closed pipe with SIGPIPE ignored) is a
  // failure, not an ok with a truncated answer.
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
    std::fprintf(stderr, "ferry: writing the output failed: %s\n", std::strerror(errno));
    if (code == kExitOk) code = kExitUsage;
  }
  return code;
}
