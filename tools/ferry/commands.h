// The ferry command's subcommands (main.cc wires them to CLI11). Each runs to completion,
// prints its result on stdout and what failed on stderr ("ferry: <what>: <why>"), and returns
// the process exit code:
//
//   0  ok
//   1  usage: bad flags or arguments, or a connection string that names no store to read
//      (P2PHANDSHAKE: each engine serves only its own descriptor; memory://: in-process only);
//      also when the output could not be written (a full disk, a closed pipe)
//   2  the metadata store could not be reached, did not answer in time, or could not answer
//      (a Mooncake HTTP server has no prefix listing, which segments and watch need)
//   3  not found: no such segment in the store
//   4  malformed: a stored descriptor failed to decode (the message names the field), or a
//      metrics endpoint served text that is not Prometheus' format
//   5  no answer: the segment's engine (probe) or the metrics endpoint (stats) did not answer,
//      or answered as another engine
//
// `segments` prints the entries that decode and reports the others; it exits 4 when any failed.
//
// Thread contract: each Run* is called once, from main's thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ferry::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitUsage = 1,
  kExitStoreUnreachable = 2,
  kExitNotFound = 3,
  kExitMalformed = 4,
  kExitNoAnswer = 5,
};

// The exit-code list above, for --help.
const char* ExitCodesHelp();

// Flags every store-reading subcommand takes.
struct StoreFlags {
  std::string connection;                   // --metadata_server: etcd://, redis://, http://
  std::string prefix = "ferry";             // --prefix: the engines' key prefix
  std::chrono::milliseconds timeout{3000};  // --timeout: bound on each round trip
};

int RunSegments(const StoreFlags& store, bool json);
int RunShow(const StoreFlags& store, const std::string& segment, bool json);

struct ProbeFlags {
  int count = 1;                             // --count: probes to send
  std::chrono::milliseconds interval{1000};  // --interval: pause between them
};
int RunProbe(const StoreFlags& store, const std::string& segment, const ProbeFlags& flags);

struct WatchFlags {
  std::chrono::milliseconds duration{0};     // --duration: 0 until SIGINT / SIGTERM
  std::chrono::milliseconds interval{1000};  // --interval: polling period without store watch
  bool poll = false;                         // --poll: poll even where the store can watch
};
int RunWatch(const StoreFlags& store, const WatchFlags& flags);

struct StatsFlags {
  std::string filter;    // --filter: only families whose name contains it
  bool buckets = false;  // --buckets: histogram buckets too
  std::chrono::milliseconds timeout{3000};
};
int RunStats(const std::string& endpoint, const StatsFlags& flags);

}  // namespace ferry::cli
