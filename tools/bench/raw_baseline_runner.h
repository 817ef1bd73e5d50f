// The raw baselines a ferry-bench sweep measures each point against: the programs of bench/
// (no ferry code) that move the same bytes the system's own way, run as child processes just
// before the point's ferry run, so that both are measured in the same minutes:
//
//   tcp  ferry-raw-tcp-baseline --block_size --duration: one loopback stream of back-to-back
//        blocks (one stream whatever --threads says).
//   shm  ferry-raw-shm-baseline --kind=cma (--kind=memcpy under --managed) with the point's
//        --operation, --block_size, --batch_size, --threads, --duration and --working_set (the
//        point's WorkingSetBytes, so that both cycle through the same bytes).
//
// rdma (whose baseline needs a target process of its own), cxl, auto: none.
//
// Thread contract: pure functions and a blocking call; safe from any thread.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "bench/bench_report.h"
#include "ferry/status.h"

namespace ferry::bench {

// One raw baseline command: `program` (a file name in the baseline folder) with `args`.
struct RawBaselineCommand {
  std::string name;  // the CSV's raw_baseline column: "tcp-stream", "shm-cma", "shm-memcpy"
  std::string program;
  std::vector<std::string> args;
};

// The raw baseline of `point` (one sweep point: one transport named by --protocol), or nullopt
// when its transport has none.
std::optional<RawBaselineCommand> RawBaselineFor(const BenchOptions& point);

// Runs `command` from `folder` with stdin from /dev/null, stderr passed through and SIGINT and
// SIGTERM unblocked, reads the JSON line it prints and waits for it to exit; after `timeout` it
// is killed (SIGKILL, by its PID). Returns its gbps, p99_us (0 when it prints none) and
// working_set, with RawPoint::baseline = command.name.
// Errors: NotFound when the program is not an executable file in `folder`; Internal for a
// failed spawn, a non-zero exit or output without "gbps"; Timeout.
Result<RawPoint> RunRawBaseline(const std::string& folder, const RawBaselineCommand& command,
                                std::chrono::milliseconds timeout);

// The folder holding the running executable (from /proc/self/exe); "." when it cannot be read.
std::string ExecutableFolder();

}  // namespace ferry::bench
