// ferry-bench --mode=target: registers one buffer and serves remote reads and writes to it.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "bench/bench_buffer.h"
#include "bench/bench_modes.h"
#include "bench/pattern.h"
#include "ferry/options.h"
#include "ferry/transfer_engine.h"

namespace ferry::bench {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(const std::string& what, const Status& status) {
  std::fprintf(stderr, "ferry-bench target: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

// Returns once a stop signal arrived, or `seconds` passed when `bounded`.
void Serve(StopSignals& signals, bool bounded, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(bounded ? seconds : 0));
  while (true) {
    auto wait = std::chrono::milliseconds(1000);
    if (bounded) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return;
      wait = std::min(wait, left);
    }
    if (signals.WaitFor(wait)) return;
  }
}

}  // namespace

int RunTarget(const BenchOptions& options, StopSignals& signals) {
  TransferEngine engine;  // declared first: it outlives the buffer registered with it
  if (Status s = engine.init(MakeEngineOptions(options)); !s.ok()) return Fail("init", s);
  Result<std::unique_ptr<BenchBuffer>> buffer = BenchBuffer::Create(
      engine, options.EffectiveBufferSize(), options.managed, options.ManagedLocation());
  if (!buffer.ok()) return Fail("allocating the buffer", buffer.status());
  BenchBuffer& memory = **buffer;
  if (options.check) FillPattern(kTargetPatternSeed, 0, memory.data(), memory.size());

  std::printf("ready segment=%s addr=0x%llx len=%zu protocol=%s managed=%d\n",
              engine.localSegmentName().c_str(),
              static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(memory.data())),
              memory.size(), options.protocol.c_str(), memory.managed() ? 1 : 0);
  std::fflush(stdout);

  Serve(signals, options.duration_given, options.duration_s);

  if (Status s = memory.Release(); !s.ok()) return Fail("releasing the buffer", s);
  return 0;
}

}  // namespace ferry::bench
