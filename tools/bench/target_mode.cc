// ferry-bench --mode=target: registers one buffer and serves remote reads and writes to it.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

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
  Result<PageBuffer> buffer = PageBuffer::Allocate(options.EffectiveBufferSize());
  if (!buffer.ok()) return Fail("allocating the buffer", buffer.status());
  if (options.check) FillPattern(kTargetPatternSeed, 0, buffer->data(), buffer->size());

  // Declared after the buffer: the engine is destroyed first, so nothing reaches the memory
  // after it is unmapped.
  TransferEngine engine;
  EngineOptions engine_options;
  engine_options.metadata_conn = options.metadata_server;
  engine_options.local_server_name = options.local_server_name;
  engine_options.host = options.host;
  engine_options.rpc_port = options.rpc_port;
  engine_options.transports = options.Transports();
  if (Status s = engine.init(engine_options); !s.ok()) return Fail("init", s);
  if (Status s = engine.registerLocalMemory(buffer->data(), buffer->size()); !s.ok()) {
    return Fail("registerLocalMemory", s);
  }

  std::printf("ready segment=%s addr=0x%llx len=%zu\n", engine.localSegmentName().c_str(),
              static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(buffer->data())),
              buffer->size());
  std::fflush(stdout);

  Serve(signals, options.duration_given, options.duration_s);

  if (Status s = engine.unregisterLocalMemory(buffer->data()); !s.ok()) {
    return Fail("unregisterLocalMemory", s);
  }
  return 0;
}

}  // namespace ferry::bench
