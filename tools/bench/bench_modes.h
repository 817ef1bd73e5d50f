// ferry-bench's two roles. Each returns the process exit status: 0 success, 1 failure (a message
// on stderr says why). Call with SIGINT and SIGTERM blocked by a StopSignals (bench_support.h)
// that the same thread owns, before any thread was started.
#pragma once

#include "bench/bench_options.h"
#include "bench/bench_support.h"

namespace ferry::bench {

// Starts an engine, registers options.EffectiveBufferSize() bytes (managed under --managed; filled
// with the target pattern under --check) and prints, on stdout, flushed,
//   "ready segment=<name> addr=0x<hex> len=<bytes> protocol=<--protocol> managed=0|1"
// (an initiator needs segment= and addr=; the rest says what it runs against).
// Serves until a stop signal, or for options.duration_s when duration_given.
int RunTarget(const BenchOptions& options, StopSignals& signals);

// Runs the measured loop against --segment_id / --target_addr and prints the summary (or the
// JSON line). A stop signal ends the loop early; the partial result is still printed.
int RunInitiator(const BenchOptions& options, StopSignals& signals);

// --sweep: for each of options.sweep_protocols, one engine with only that transport, then for
// each thread count, block size and operation (in that nesting) the point's raw baseline
// (raw_baseline_runner.h) and one measured run (as RunInitiator's, without --check), each
// written as a CSV row (bench_report.h) to --csv or stdout, flushed, with a one-line summary on
// stderr. A failed point is reported and the sweep goes on (exit status 1 at the end); a
// failed raw baseline leaves its columns empty (exit status unchanged); a stop signal ends the
// sweep after the running point.
int RunSweep(const BenchOptions& options, StopSignals& signals);

}  // namespace ferry::bench
