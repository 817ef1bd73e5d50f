// The main() of a Google Benchmark program with one opt-in flag of its own (e.g. --largest,
// --full) that adds benchmarks too slow for the default run, which the ctest smoke run makes.
#pragma once

#include <benchmark/benchmark.h>

#include <cstring>
#include <functional>
#include <vector>

namespace ferry::bench {

// Strips `flag` from the arguments, calls `register_extra` when it was there, then runs the
// benchmarks the rest of the arguments select. Returns main's exit code.
inline int RunBenchmarks(int argc, char** argv, const char* flag,
                         const std::function<void()>& register_extra) {
  std::vector<char*> args;
  bool extra = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) {
      extra = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  if (extra) register_extra();
  int count = static_cast<int>(args.size());
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace ferry::bench
