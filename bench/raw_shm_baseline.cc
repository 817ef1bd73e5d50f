// ferry-raw-shm-baseline: the same-host ceilings bench/shm.sh measures ferry's shm transport
// against, in the same run. No ferry code. Two processes: the program forks a target that owns
// the destination memory; the parent (the initiator) moves blocks into or out of it.
//
//   --kind=cma     process_vm_writev / process_vm_readv, one call per block, into / out of a
//                  private buffer of the target (touched by the target, transparent huge pages
//                  requested). The target calls prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY) as
//                  ferry's shm transport does, so Yama's ptrace_scope=1 does not refuse it.
//   --kind=memcpy  memcpy into / out of a memfd mapped MAP_SHARED by both processes (the target
//                  creates and touches it; the initiator maps it by itself). Pages as ferry's
//                  managed buffers get them: MFD_HUGETLB when the size is a multiple of 2 MiB and
//                  the kernel has huge pages reserved, else normal pages with MADV_HUGEPAGE.
//
// The loop is ferry-bench's: each of --threads threads moves batches of --batch_size blocks of
// --block_size bytes between a slice of a private local buffer and the same slice of the
// target's buffer, for --duration seconds, cycling through its slices of the working set (as
// ferry-bench --working_set does: thread t's j-th batch moves slice t + (j mod n) * threads).
// --working_set (rounded down to a multiple of threads * batch_size * block_size, at least one)
// defaults to one slice per thread for cma, and for memcpy to twice the last-level cache
// (the highest-level cache of cpu0 in sysfs; 64 MiB when sysfs does not say), so that memcpy
// copies from and into memory, not between cache-hot slices; bench/shm.sh passes the same
// working set to ferry-bench. One untimed pass over the working set runs before the clock
// starts (page-table faults); afterwards the first block is checked to have really moved.
//
// Each batch is timed (steady_clock around it); with --batch_size=1 that is the latency of one
// block's copy: for cma one process_vm_writev/readv call, which returns once the bytes are in
// (or out of) the target's memory, so it is the whole raw round trip of a same-host write or
// read (ferry's shm transport, too, tells the target nothing per block).
//
//   ferry-raw-shm-baseline --kind=cma|memcpy [--operation=write|read] [--block_size=64K]
//                          [--batch_size=32] [--threads=1] [--duration=3]
//                          [--working_set=BYTES]
//   {"kind":"cma","operation":"write","block_size":65536,"batch_size":32,"threads":1,
//    "pages":"thp","working_set":...,"gbps":...,"ops_per_s":...,"bytes":...,"seconds":...,
//    "p50_us":...,"p99_us":...,"mean_us":...}
//
// gbps is 10^9 bytes per second, from the first timed block until the last thread stopped;
// p50/p99/mean are per batch, at 50 ns resolution up to 1 ms and 100 us beyond.
// Exit status: 0 success, 1 a failed system call or check (message on stderr), 2 bad flags.
#include <fcntl.h>
#include <linux/memfd.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "raw_baseline.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kHugePage = size_t{2} << 20;
constexpr uint8_t kTargetByte = 0x5a;     // what the target fills its buffer with
constexpr uint8_t kInitiatorByte = 0x66;  // what the initiator's local buffer holds
constexpr int kReadyTimeoutMs = 30000;    // the target allocating and touching its buffer

enum class Kind : uint8_t { kCma, kMemcpy };

struct Options {
  Kind kind = Kind::kCma;
  bool write = true;
  uint64_t block_size = 65536;
  uint64_t batch_size = 32;
  uint64_t threads = 1;
  double duration_s = 3;
  uint64_t working_set = 0;  // 0: the kind's default (see the top of the file)

  uint64_t SliceBytes() const { return block_size * batch_size; }
  // Slices each thread cycles through.
  uint64_t SlicesPerThread() const {
    return std::max<uint64_t>(1, working_set / (SliceBytes() * threads));
  }
  uint64_t WorkingSetBytes() const { return SliceBytes() * threads * SlicesPerThread(); }
  // The offset of thread t's j-th slice.
  uint64_t SliceOffset(uint64_t t, uint64_t j) const {
    return (t + (j % SlicesPerThread()) * threads) * SliceBytes();
  }
};

// The size of the highest-level cache sysfs lists for cpu0; 0 when it lists none.
uint64_t LastLevelCacheBytes() {
  uint64_t best_size = 0;
  int best_level = -1;
  for (int i = 0; i < 16; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    FILE* level_file = std::fopen((dir + "level").c_str(), "r");
    if (level_file == nullptr) continue;
    int level = -1;
    const bool have_level = std::fscanf(level_file, "%d", &level) == 1;
    std::fclose(level_file);
    FILE* size_file = std::fopen((dir + "size").c_str(), "r");
    if (size_file == nullptr) continue;
    char text[32] = {};
    const bool have_size = std::fscanf(size_file, "%31s", text) == 1;
    std::fclose(size_file);
    const std::optional<uint64_t> size = have_size ? raw_baseline::ParseBytes(text) : std::nullopt;
    if (have_level && size && level > best_level) {
      best_level = level;
      best_size = *size;
    }
  }
  return best_size;
}

// Sizes up to 64 GiB.
std::optional<uint64_t> ParseBytes(std::string_view text) {
  return raw_baseline::ParseBytes(text, 36);
}

// A count in 1..max; nullopt otherwise.
std::optional<uint64_t> ParseCount(std::string_view text, uint64_t max) {
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size() || value == 0 || value > max) {
    return std::nullopt;
  }
  return value;
}

// Applies one "--name=value"; false when the flag is unknown or the value bad.
bool ApplyFlag(std::string_view name, std::string_view value, Options& o) {
  if (name == "kind") {
    if (value != "cma" && value != "memcpy") return false;
    o.kind = value == "cma" ? Kind::kCma : Kind::kMemcpy;
    return true;
  }
  if (name == "operation") {
    if (value != "write" && value != "read") return false;
    o.write = value == "write";
    return true;
  }
  if (name == "duration") {
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), o.duration_s);
    return ec == std::errc() && ptr == value.data() + value.size() && o.duration_s > 0 &&
           o.duration_s < 1e6;
  }
  std::optional<uint64_t> n;
  if (name == "block_size" || name == "working_set") n = ParseBytes(value);
  if (name == "batch_size") n = ParseCount(value, 1 << 16);
  if (name == "threads") n = ParseCount(value, 64);
  if (!n) return false;
  (name == "block_size"    ? o.block_size
   : name == "batch_size"  ? o.batch_size
   : name == "working_set" ? o.working_set
                           : o.threads) = *n;
  return true;
}

// Parses argv; nullopt (after a message on stderr) on a bad or unknown flag.
std::optional<Options> ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.substr(0, 2) != "--" || eq == std::string_view::npos ||
        !ApplyFlag(arg.substr(2, eq - 2), arg.substr(eq + 1), o)) {
      std::fprintf(stderr,
                   "bad argument '%s'\nusage: ferry-raw-shm-baseline --kind=cma|memcpy "
                   "[--operation=write|read] [--block_size=BYTES] [--batch_size=N] "
                   "[--threads=N] [--duration=SECONDS] [--working_set=BYTES]\n"
                   "  --working_set: bytes the batches cycle through (default: cma one slice "
                   "per thread; memcpy twice the last-level cache, from sysfs, else 64 MiB, so "
                   "that it copies out of cache as ferry-bench --working_set does)\n",
                   argv[i]);
      return std::nullopt;
    }
  }
  if (o.working_set == 0 && o.kind == Kind::kMemcpy) {
    const uint64_t llc = LastLevelCacheBytes();
    o.working_set = llc > 0 ? 2 * llc : uint64_t{64} << 20;
  }
  if (o.SliceBytes() * o.threads > (uint64_t{1} << 36) ||
      o.WorkingSetBytes() > (uint64_t{1} << 36)) {
    std::fprintf(stderr, "threads * batch_size * block_size is too large\n");
    return std::nullopt;
  }
  return o;
}

bool Fail(const char* what) {
  std::fprintf(stderr, "ferry-raw-shm-baseline: %s: %s\n", what, std::strerror(errno));
  return false;
}

// Keeps the compiler from dropping stores to (or loads from) memory it thinks nobody reads.
void Clobber(void* p) { asm volatile("" : : "r"(p) : "memory"); }

// A private anonymous mapping, THP requested, filled with `fill`; nullptr after a message.
uint8_t* MapPrivate(size_t size, uint8_t fill) {
  void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    Fail("mmap");
    return nullptr;
  }
  madvise(mem, size, MADV_HUGEPAGE);
  std::memset(mem, fill, size);
  return static_cast<uint8_t*>(mem);
}

// The shared memory of --kind=memcpy: a memfd as ferry's managed buffers get it.
struct SharedFile {
  int fd = -1;
  size_t size = 0;  // the working set, rounded up to the page size used
  const char* pages = "normal";
};

std::optional<SharedFile> MakeSharedFile(size_t working_set) {
  SharedFile f;
  f.size = (working_set + kHugePage - 1) / kHugePage * kHugePage;
  f.fd = static_cast<int>(memfd_create("ferry-raw-shm", MFD_CLOEXEC | MFD_HUGETLB | MFD_HUGE_2MB));
  if (f.fd >= 0) {
    // Hugetlb reserves at mmap time: probe that the pages exist now, not at first touch.
    void* probe = ftruncate(f.fd, static_cast<off_t>(f.size)) == 0
                      ? mmap(nullptr, f.size, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0)
                      : MAP_FAILED;
    if (probe != MAP_FAILED) {
      munmap(probe, f.size);
      f.pages = "hugetlb";
      return f;
    }
    close(f.fd);
  }
  f.fd = static_cast<int>(memfd_create("ferry-raw-shm", MFD_CLOEXEC));
  if (f.fd < 0) {
    Fail("memfd_create");
    return std::nullopt;
  }
  if (ftruncate(f.fd, static_cast<off_t>(f.size)) != 0) {
    Fail("ftruncate");
    close(f.fd);
    return std::nullopt;
  }
  f.pages = "shmem";
  return f;
}

// Maps the shared file MAP_SHARED (THP advised); nullptr after a message.
uint8_t* MapShared(const SharedFile& f) {
  void* mem = mmap(nullptr, f.size, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, 0);
  if (mem == MAP_FAILED) {
    Fail("mmap of the memfd");
    return nullptr;
  }
  madvise(mem, f.size, MADV_HUGEPAGE);
  return static_cast<uint8_t*>(mem);
}

// What the target reports once its memory is ready: where it lies, or why it failed.
struct ReadyMessage {
  uint64_t addr = 0;  // 0: failed
  int32_t error = 0;  // errno of the failure
};

// The forked target: allows any same-user process to attach, makes and touches its memory,
// reports it through `ready_fd`, and holds it until `done_fd` reaches EOF (the initiator closed
// it or died). Never returns.
[[noreturn]] void RunTarget(const Options& o, const SharedFile* shared, int ready_fd, int done_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0 && errno != EINVAL) {
    Fail("prctl(PR_SET_PTRACER)");  // only a warning: same-user attach may still be allowed
  }
  ReadyMessage ready;
  uint8_t* memory = nullptr;
  if (shared != nullptr) {
    memory = MapShared(*shared);
    if (memory != nullptr) std::memset(memory, kTargetByte, shared->size);
  } else {
    memory = MapPrivate(o.WorkingSetBytes(), kTargetByte);
  }
  ready.addr = reinterpret_cast<uint64_t>(memory);
  ready.error = errno;
  if (write(ready_fd, &ready, sizeof(ready)) != static_cast<ssize_t>(sizeof(ready))) _exit(1);
  char byte;
  while (read(done_fd, &byte, 1) < 0 && errno == EINTR) {
  }
  _exit(0);  // EOF (or an error): the initiator is done with the memory
}

// Moves one block with process_vm_writev / readv; false after a message.
bool MoveCma(pid_t pid, bool write, uint8_t* local, uint64_t remote, size_t length) {
  while (length > 0) {
    iovec local_iov{local, length};
    iovec remote_iov{reinterpret_cast<void*>(remote), length};
    const ssize_t n = write ? process_vm_writev(pid, &local_iov, 1, &remote_iov, 1, 0)
                            : process_vm_readv(pid, &local_iov, 1, &remote_iov, 1, 0);
    if (n <= 0) return Fail(write ? "process_vm_writev" : "process_vm_readv");
    local += n;
    remote += static_cast<uint64_t>(n);
    length -= static_cast<size_t>(n);
  }
  return true;
}

// Where the initiator's threads move bytes: the target's pid and address (cma), or the
// initiator's own mapping of the shared file (memcpy).
struct Peer {
  Kind kind = Kind::kCma;
  pid_t pid = 0;
  uint64_t remote = 0;        // cma: the target's address
  uint8_t* mapped = nullptr;  // memcpy: this process's mapping
};

// Moves one batch: the slice at `base` of both buffers; false after a message.
bool MoveBatch(const Options& o, const Peer& peer, uint8_t* local, uint64_t base) {
  for (uint64_t i = 0; i < o.batch_size; ++i) {
    const uint64_t offset = base + i * o.block_size;
    if (peer.kind == Kind::kCma) {
      if (!MoveCma(peer.pid, o.write, local + offset, peer.remote + offset, o.block_size)) {
        return false;
      }
    } else if (o.write) {
      std::memcpy(peer.mapped + offset, local + offset, o.block_size);
      Clobber(peer.mapped + offset);
    } else {
      std::memcpy(local + offset, peer.mapped + offset, o.block_size);
      Clobber(local + offset);
    }
  }
  return true;
}

// Batch latencies of one thread, without a sample per batch (a 4 KiB memcpy loop runs millions
// a second): 50 ns buckets up to 1 ms, 100 us buckets up to 1 s (later ones count as 1 s), and
// the exact sum for the mean.
class LatencyHistogram {
 public:
  void Add(Clock::duration d) {
    const auto ns = static_cast<uint64_t>(std::chrono::nanoseconds(d).count());
    sum_ns_ += ns;
    ++count_;
    if (ns < kFineBuckets * kFineNs) {
      ++fine_[ns / kFineNs];
    } else {
      ++coarse_[std::min<uint64_t>(ns / kCoarseNs, kCoarseBuckets - 1)];
    }
  }
  void Merge(const LatencyHistogram& other) {
    for (size_t i = 0; i < fine_.size(); ++i) fine_[i] += other.fine_[i];
    for (size_t i = 0; i < coarse_.size(); ++i) coarse_[i] += other.coarse_[i];
    sum_ns_ += other.sum_ns_;
    count_ += other.count_;
  }
  // The nearest-rank percentile (0 < p <= 100) in microseconds, as a bucket's upper edge.
  double PercentileUs(double p) const {
    if (count_ == 0) return 0;
    const auto rank = std::max<uint64_t>(
        1, static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(count_))));
    uint64_t seen = 0;
    for (size_t i = 0; i < fine_.size(); ++i) {
      seen += fine_[i];
      if (seen >= rank) return static_cast<double>((i + 1) * kFineNs) / 1e3;
    }
    for (size_t i = 0; i < coarse_.size(); ++i) {
      seen += coarse_[i];
      if (seen >= rank) return static_cast<double>((i + 1) * kCoarseNs) / 1e3;
    }
    return static_cast<double>(kCoarseBuckets * kCoarseNs) / 1e3;
  }
  double MeanUs() const {
    return count_ == 0 ? 0 : static_cast<double>(sum_ns_) / static_cast<double>(count_) / 1e3;
  }

 private:
  static constexpr uint64_t kFineNs = 50;
  static constexpr uint64_t kFineBuckets = 20000;  // up to 1 ms
  static constexpr uint64_t kCoarseNs = 100000;
  static constexpr uint64_t kCoarseBuckets = 10000;  // up to 1 s
  std::vector<uint64_t> fine_ = std::vector<uint64_t>(kFineBuckets);
  std::vector<uint64_t> coarse_ = std::vector<uint64_t>(kCoarseBuckets);
  uint64_t sum_ns_ = 0;
  uint64_t count_ = 0;
};

struct RunResult {
  uint64_t ops = 0;
  double seconds = 0;
  bool ok = true;
  LatencyHistogram latency;  // per batch
};

// Runs the threads for the duration after one untimed pass over the working set.
RunResult Measure(const Options& o, const Peer& peer, uint8_t* local) {
  RunResult result;
  std::atomic<bool> ok{true};
  for (uint64_t base = 0; base < o.WorkingSetBytes() && ok; base += o.SliceBytes()) {
    ok = MoveBatch(o, peer, local, base);
  }
  if (!ok) {
    result.ok = false;
    return result;
  }
  std::atomic<uint64_t> ops{0};
  std::vector<LatencyHistogram> latencies(o.threads);
  const auto duration =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration_s));
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (uint64_t t = 0; t < o.threads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t done = 0;
      auto before = Clock::now();
      for (uint64_t j = 0; ok.load(std::memory_order_relaxed) && before - start < duration; ++j) {
        if (!MoveBatch(o, peer, local, o.SliceOffset(t, j))) ok = false;
        const auto after = Clock::now();
        latencies[t].Add(after - before);
        before = after;
        done += o.batch_size;
      }
      ops.fetch_add(done);
    });
  }
  for (auto& thread : threads) thread.join();
  result.ops = ops.load();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.ok = ok.load();
  for (const LatencyHistogram& h : latencies) result.latency.Merge(h);
  return result;
}

// After the run: the first block really moved (a write reached the target, a read brought the
// target's bytes). False after a message.
bool CheckMoved(const Options& o, const Peer& peer, uint8_t* local) {
  const uint8_t want = o.write ? kInitiatorByte : kTargetByte;
  std::vector<uint8_t> block(o.block_size);
  if (o.write) {
    if (peer.kind == Kind::kCma) {
      if (!MoveCma(peer.pid, false, block.data(), peer.remote, block.size())) return false;
    } else {
      std::memcpy(block.data(), peer.mapped, block.size());
    }
  } else {
    std::memcpy(block.data(), local, block.size());
  }
  if (std::all_of(block.begin(), block.end(), [&](uint8_t b) { return b == want; })) return true;
  std::fprintf(stderr, "ferry-raw-shm-baseline: the first block did not move\n");
  return false;
}

// Closes the target's done pipe and reaps it: bounded, SIGKILL after 5 s.
void StopTarget(pid_t pid, int done_fd) {
  close(done_fd);
  for (int i = 0; i < 500; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return;
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

// Waits (bounded) for the target's ReadyMessage; false after a message.
bool AwaitReady(int ready_fd, ReadyMessage& ready) {
  pollfd p{ready_fd, POLLIN, 0};
  if (poll(&p, 1, kReadyTimeoutMs) != 1) {
    std::fprintf(stderr, "ferry-raw-shm-baseline: the target did not become ready\n");
    return false;
  }
  if (read(ready_fd, &ready, sizeof(ready)) != static_cast<ssize_t>(sizeof(ready))) {
    return Fail("reading the target's ready message");
  }
  if (ready.addr == 0) {
    errno = ready.error;
    return Fail("the target could not make its memory");
  }
  return true;
}

// Forks the target, measures, checks, stops the target; false after a message.
bool Run(const Options& o, const SharedFile* shared, const char* pages) {
  int ready_pipe[2];
  int done_pipe[2];
  if (pipe2(ready_pipe, O_CLOEXEC) != 0) return Fail("pipe2");
  if (pipe2(done_pipe, O_CLOEXEC) != 0) return Fail("pipe2");
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return Fail("fork");
  if (pid == 0) {
    close(ready_pipe[0]);
    close(done_pipe[1]);
    RunTarget(o, shared, ready_pipe[1], done_pipe[0]);
  }
  close(ready_pipe[1]);
  close(done_pipe[0]);
  // Mapped after the fork, so the target shares none of its pages (no copy-on-write faults).
  uint8_t* local = MapPrivate(o.WorkingSetBytes(), kInitiatorByte);
  ReadyMessage ready;
  bool ok = local != nullptr && AwaitReady(ready_pipe[0], ready);
  close(ready_pipe[0]);
  Peer peer{o.kind, pid, ready.addr, nullptr};
  if (ok && shared != nullptr) {
    peer.mapped = MapShared(*shared);
    ok = peer.mapped != nullptr;
  }
  RunResult r;
  if (ok) r = Measure(o, peer, local);
  ok = ok && r.ok && CheckMoved(o, peer, local);
  StopTarget(pid, done_pipe[1]);
  if (peer.mapped != nullptr) munmap(peer.mapped, shared->size);
  if (local != nullptr) munmap(local, o.WorkingSetBytes());
  if (!ok) return false;

  const double bytes = static_cast<double>(r.ops) * static_cast<double>(o.block_size);
  std::printf(
      "{\"kind\":\"%s\",\"operation\":\"%s\",\"block_size\":%llu,\"batch_size\":%llu,"
      "\"threads\":%llu,\"pages\":\"%s\",\"working_set\":%llu,\"gbps\":%.6f,"
      "\"ops_per_s\":%.1f,\"bytes\":%.0f,\"seconds\":%.6f,\"p50_us\":%.2f,\"p99_us\":%.2f,"
      "\"mean_us\":%.2f}\n",
      o.kind == Kind::kCma ? "cma" : "memcpy", o.write ? "write" : "read",
      static_cast<unsigned long long>(o.block_size), static_cast<unsigned long long>(o.batch_size),
      static_cast<unsigned long long>(o.threads), pages,
      static_cast<unsigned long long>(o.WorkingSetBytes()), bytes / r.seconds / 1e9,
      static_cast<double>(r.ops) / r.seconds, bytes, r.seconds, r.latency.PercentileUs(50),
      r.latency.PercentileUs(99), r.latency.MeanUs());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Options> options = ParseArgs(argc, argv);
  if (!options) return 2;
  if (options->kind == Kind::kCma) return Run(*options, nullptr, "thp") ? 0 : 1;
  std::optional<SharedFile> shared = MakeSharedFile(options->WorkingSetBytes());
  if (!shared) return 1;
  const bool ok = Run(*options, &*shared, shared->pages);
  close(shared->fd);
  return ok ? 0 : 1;
}
