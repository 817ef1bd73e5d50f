// ferry-bench: measures ferry transfers between a target and an initiator process, in the style
// of Mooncake's transfer_engine_bench. Flags and the ready-line protocol: BenchUsage().
#include <sys/prctl.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_modes.h"
#include "bench/bench_options.h"
#include "bench/bench_support.h"

int main(int argc, char** argv) {
  using namespace ferry::bench;
  const std::vector<std::string> args(argv + 1, argv + argc);
  ferry::Result<BenchOptions> options = ParseBenchOptions(args);
  if (!options.ok()) {
    std::fprintf(stderr, "ferry-bench: %s\n\n%s", options.status().message().c_str(),
                 BenchUsage().c_str());
    return 2;
  }
  if (options->help) {
    std::printf("%s", BenchUsage().c_str());
    return 0;
  }
  // The default 50 us timer slack would stretch the pollers' short sleeps (and every engine
  // thread's) well past what they ask for; threads made from here on inherit the tighter slack.
  prctl(PR_SET_TIMERSLACK, 1000UL);  // 1 us; best effort
  StopSignals signals;  // before any thread starts, so every thread inherits the blocked mask
  if (options->mode == BenchMode::kTarget) return RunTarget(*options, signals);
  return options->sweep ? RunSweep(*options, signals) : RunInitiator(*options, signals);
}
