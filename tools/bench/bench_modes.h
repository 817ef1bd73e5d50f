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

}  // namespace ferry::bench
