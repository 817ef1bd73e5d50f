// ferry-bench --mode=target: registers one buffer and serves remote reads and writes to it: memory
// (BenchBuffer), or with --target_file a window of a file (registerLocalFile).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_buffer.h"
#include "bench/bench_modes.h"
#include "bench/pattern.h"
#include "ferry/options.h"
#include "ferry/transfer_engine.h"

namespace ferry::bench {
namespace {

using Clock = std::chrono::steady_clock;

int TargetFailed(const std::string& what, const Status& status) {
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

// Makes `path` ready to be a `size`-byte file buffer: creates a missing file, extends a regular
// file shorter than `size` (a block device must be large enough already: registerLocalFile
// says so otherwise) and writes the read pattern over [0, size), so that reads meet written
// blocks (no holes) and an initiator's --check read finds the pattern. Errors name the path.
Status PrepareTargetFile(const std::string& path, uint64_t size) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return InvalidArgumentError("cannot open --target_file '" + path +
                                "': " + std::strerror(errno));
  }
  auto fail = [&](const std::string& what) {
    const int err = errno;
    ::close(fd);
    return InvalidArgumentError(what + " --target_file '" + path + "': " + std::strerror(err));
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fail("cannot stat");
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) < size &&
      ::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    return fail("cannot extend");
  }
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<uint8_t> chunk(kChunk);
  for (uint64_t offset = 0; offset < size; offset += kChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size - offset));
    FillPattern(kTargetPatternSeed, offset, chunk.data(), n);
    size_t done = 0;
    while (done < n) {
      const ssize_t put =
          ::pwrite(fd, chunk.data() + done, n - done, static_cast<off_t>(offset + done));
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) return fail("cannot write the pattern to");
      done += static_cast<size_t>(put);
    }
  }
  ::close(fd);
  return Status::Ok();
}

// --target_file: registers the file window, serves, unregisters it.
int RunFileTarget(TransferEngine& engine, const BenchOptions& options, StopSignals& signals) {
  const uint64_t size = options.EffectiveBufferSize();
  if (Status s = PrepareTargetFile(options.target_file, size); !s.ok()) {
    return TargetFailed("preparing the file", s);
  }
  Result<uint64_t> addr = engine.registerLocalFile(options.target_file, size);
  if (!addr.ok()) return TargetFailed("registerLocalFile " + options.target_file, addr.status());

  std::printf("ready segment=%s addr=0x%llx len=%llu protocol=%s managed=0 file=%s\n",
              engine.localSegmentName().c_str(), static_cast<unsigned long long>(*addr),
              static_cast<unsigned long long>(size), options.protocol.c_str(),
              options.target_file.c_str());
  std::fflush(stdout);

  Serve(signals, options.duration_given, options.duration_s);

  if (Status s = engine.unregisterLocalFile(*addr); !s.ok()) {
    return TargetFailed("unregisterLocalFile", s);
  }
  return 0;
}

}  // namespace

int RunTarget(const BenchOptions& options, StopSignals& signals) {
  TransferEngine engine;  // declared first: it outlives the buffer registered with it
  if (Status s = engine.init(MakeEngineOptions(options)); !s.ok()) return TargetFailed("init", s);
  if (!options.target_file.empty()) return RunFileTarget(engine, options, signals);
  Result<std::unique_ptr<BenchBuffer>> buffer = BenchBuffer::Create(
      engine, options.EffectiveBufferSize(), options.BufferFromEngine(), options.BufferLocation());
  if (!buffer.ok()) return TargetFailed("allocating the buffer", buffer.status());
  BenchBuffer& memory = **buffer;
  if (options.check) FillPattern(kTargetPatternSeed, 0, memory.data(), memory.size());

  std::printf("ready segment=%s addr=0x%llx len=%zu protocol=%s managed=%d\n",
              engine.localSegmentName().c_str(),
              static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(memory.data())),
              memory.size(), options.protocol.c_str(), memory.managed() ? 1 : 0);
  std::fflush(stdout);

  Serve(signals, options.duration_given, options.duration_s);

  if (Status s = memory.Release(); !s.ok()) return TargetFailed("releasing the buffer", s);
  return 0;
}

}  // namespace ferry::bench
