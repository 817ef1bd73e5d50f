// Load: 8 initiator threads in this process's engine drive 4 ferry-test-peer targets (two that
// install only tcp, two on the default auto set, which this host reaches over shm) with a
// seeded random mix of reads and writes of 4 KiB to 4 MiB, for a bounded time. Every task is
// accounted for (submitted == completed + failed, none left open), every byte is verified (each
// read against what was last written there; at the end every range through the peer's "sum"),
// and resident memory stays bounded once warmed up.
//
// Each thread owns one disjoint range in each target. A write carries a pattern derived from
// (thread, op sequence, position in the range), so a byte landing in the wrong place, from the
// wrong write, or not at all is told apart from the right one. FERRY_LOAD_SEED=<n> replays a
// run's choices (the interleaving of threads is the scheduler's).
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/sanitizers.h"
#include "common/wait_for.h"
#include "ferry/transfer_engine.h"
#include "peer_client.h"
#include "test_servers.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::Fnv;
using testing::Peer;
using testing::TempDir;

constexpr int kThreads = 8;
constexpr int kTargets = 4;
// Each thread's range in each target; smaller under sanitizers, whose instrumented checksums
// make the final check of every byte the slow part.
constexpr uint64_t kRange = kSanitized ? (5 << 20) : (8 << 20);
constexpr uint64_t kMinOp = 4 << 10;
constexpr uint64_t kMaxOp = 4 << 20;
constexpr int kDepth = 4;          // at most this many tasks in one batch
constexpr int kWarmupBatches = 8;  // per thread, after the initial fill
constexpr uint64_t kPeerBytes = kRange * kThreads;
static_assert(kRange >= kMaxOp && kRange % kDepth == 0, "ops fit a range; the fill tiles it");
// Bounds: a task ends by its deadline (task_timeout), so a waitBatch that outlives it is a hang.
constexpr auto kTaskTimeout = 30s;
constexpr auto kWaitBound = 60s;
constexpr uint64_t kRssBound = 64 << 20;

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// What a range holds where: key 0 is the peer's initial zeros, kUnknown a write that failed
// (its bytes may or may not have landed), any other key the write (thread, sequence) it names.
constexpr uint64_t kZeros = 0;
constexpr uint64_t kUnknown = ~uint64_t{0};

uint64_t WriteKey(int thread, uint64_t seq) {
  const uint64_t k = Mix((uint64_t(thread) << 48) ^ seq);
  return k == kZeros || k == kUnknown ? 1 : k;
}

// The bytes write `key` puts at [pos, pos + len) of a range: 8-byte words Mix(key ^ word index),
// so the same write at another position gives other bytes.
void FillPattern(uint64_t key, uint64_t pos, unsigned char* out, uint64_t len) {
  if (key == kZeros) {
    std::memset(out, 0, len);
    return;
  }
  uint64_t i = 0;
  while (i < len) {
    const uint64_t p = pos + i;
    const uint64_t word = Mix(key ^ (p >> 3) * 0x2545f4914f6cdd1dULL);
    const uint64_t skip = p & 7;
    const uint64_t n = std::min<uint64_t>(8 - skip, len - i);
    std::memcpy(out + i, reinterpret_cast<const unsigned char*>(&word) + skip, n);
    i += n;
  }
}

// Which write last landed where in one thread's range of one target: disjoint pieces
// [start, end) -> key, covering [0, kRange). Thread contract: used by its owning thread only.
class RangeHistory {
 public:
  RangeHistory() { pieces_[0] = {kRange, kZeros}; }

  void Assign(uint64_t off, uint64_t len, uint64_t key) {
    const uint64_t end = off + len;
    SplitAt(off);
    SplitAt(end);
    pieces_.erase(pieces_.lower_bound(off), pieces_.lower_bound(end));
    pieces_[off] = {end, key};
  }

  // Writes what [off, off + len) should hold into `out`; false where a failed write left it
  // unknown (nothing to compare then).
  bool Expected(uint64_t off, uint64_t len, unsigned char* out) const {
    const uint64_t end = off + len;
    auto it = std::prev(pieces_.upper_bound(off));
    for (; it != pieces_.end() && it->first < end; ++it) {
      if (it->second.key == kUnknown) return false;
      const uint64_t lo = std::max(off, it->first);
      const uint64_t hi = std::min(end, it->second.end);
      FillPattern(it->second.key, lo, out + (lo - off), hi - lo);
    }
    return true;
  }

  size_t pieces() const { return pieces_.size(); }

 private:
  struct Piece {
    uint64_t end;
    uint64_t key;
  };
  void SplitAt(uint64_t pos) {
    if (pos >= kRange) return;
    auto it = std::prev(pieces_.upper_bound(pos));
    if (it->first == pos) return;
    const Piece tail = {it->second.end, it->second.key};
    it->second.end = pos;
    pieces_[pos] = tail;
  }
  std::map<uint64_t, Piece> pieces_;
};

// VmRSS of a process, in bytes (0 when it cannot be read).
uint64_t ResidentBytes(const std::string& pid = "self") {
  std::ifstream in("/proc/" + pid + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) << 10;
  }
  return 0;
}

size_t OpenFds() {
  size_t n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

double MiB(double bytes) { return bytes / (1 << 20); }

// What every thread adds up; read by the main thread while the threads run.
struct Counters {
  std::atomic<uint64_t> submitted{0};
  std::atomic<uint64_t> completed{0};
  std::atomic<uint64_t> failed{0};
  std::atomic<uint64_t> bytes{0};  // completed bytes, reads and writes
  std::atomic<uint64_t> reads_verified{0};
  std::atomic<uint64_t> by_tcp{0};
  std::atomic<uint64_t> by_shm{0};
  std::atomic<uint64_t> by_other{0};
};

class LoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = TempDir::Create("load");
    ASSERT_TRUE(dir.ok());
    dir_ = std::make_unique<TempDir>(std::move(dir).value());
    if (const char* s = std::getenv("FERRY_LOAD_SEED")) {
      seed_ = std::strtoull(s, nullptr, 10);
    } else {
      seed_ = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
    }
    std::printf("[load] seed %" PRIu64 " (FERRY_LOAD_SEED=%" PRIu64 " replays it)\n", seed_, seed_);
  }

  // Starts target `i`: the even ones install only tcp, the odd ones the default set (shm here).
  // The process only; ReadyPeer waits for it (all start at once).
  Peer SpawnPeer(int i) {
    Peer peer;
    std::vector<std::string> argv = {"/usr/bin/env"};
    if (i % 2 == 0) argv.push_back("FERRY_PEER_TRANSPORTS=tcp");
    for (std::string a : {testing::BinDir() + "/ferry-test-peer", std::string("P2PHANDSHAKE"),
                          std::string(""), std::string("0"), std::to_string(kPeerBytes)}) {
      argv.push_back(a);
    }
    auto child =
        ChildProcess::SpawnPiped(argv, dir_->path() + "/peer" + std::to_string(i) + ".log");
    EXPECT_TRUE(child.ok()) << child.status();
    if (child.ok()) peer.process = std::move(child).value();
    return peer;
  }
  // True once `peer` printed its ready line (bounded).
  static bool ReadyPeer(Peer& peer) {
    if (!peer.process) return false;
    Result<std::string> ready = peer.process->ReadLine(20s);
    EXPECT_TRUE(ready.ok()) << ready.status() << "\n" << peer.process->LogTail();
    if (!ready.ok()) return false;
    EXPECT_TRUE(peer.ParseReady(*ready)) << *ready;
    return peer.length == kPeerBytes;
  }

  // Records a problem (kept to the first few) and tells every thread to stop.
  void Report(const std::string& what) {
    MutexLock lock(mu_);
    ++problems_;
    if (messages_.size() < 20) messages_.push_back(what);
    stop_ = true;
  }

  void RunThread(int t);

  std::unique_ptr<TempDir> dir_;
  uint64_t seed_ = 0;
  // Per thread, each used by its thread only; allocated before the threads start and kept until
  // the end (past the engine, declared below), so resident memory measured at the end holds them.
  std::vector<std::vector<RangeHistory>> history_;    // [thread][target]
  std::vector<std::vector<unsigned char>> local_;     // kDepth slots of kMaxOp, registered
  std::vector<std::vector<unsigned char>> expected_;  // kRange: what a read should have found
  std::vector<std::chrono::steady_clock::time_point> load_ended_;  // its last batch ended
  // What "sum" of each range should answer at the end; empty where a failed write left bytes
  // unknown (the failure already failed the test).
  std::vector<std::vector<std::optional<uint64_t>>> final_sums_;  // [thread][target]
  TransferEngine engine_;
  std::vector<Peer> peers_;  // set up before the threads start, read-only while they run
  std::vector<SegmentId> targets_;
  Counters counters_;
  std::atomic<int> warmed_{0};
  std::atomic<bool> stop_{false};
  // steady_clock ticks since its epoch at which the threads stop; set once warmed up.
  std::atomic<std::chrono::steady_clock::rep> stop_at_{
      std::numeric_limits<std::chrono::steady_clock::rep>::max()};
  Mutex mu_;
  int problems_ GUARDED_BY(mu_) = 0;
  std::vector<std::string> messages_ GUARDED_BY(mu_);
};

// One initiator thread: fills its range in every target, then submits batches of 1..kDepth
// random reads and writes (never two overlapping ones in one batch), each batch waited for with
// a bound, until stop_at_.
void LoadTest::RunThread(int t) {
  std::mt19937_64 rng(seed_ ^ Mix(uint64_t(t) + 1));
  std::vector<unsigned char>& local = local_[t];
  std::vector<unsigned char>& expected = expected_[t];
  Status reg = engine_.registerLocalMemory(local.data(), local.size());
  if (!reg.ok()) {
    Report("thread " + std::to_string(t) + ": register: " + reg.ToString());
    ++warmed_;
    return;
  }
  uint64_t seq = 0;

  struct Op {
    OpCode opcode;
    int target;
    uint64_t off;  // in the thread's range
    uint64_t len;
    uint64_t key;  // writes
  };
  // Submits `ops` as one batch, waits for it (bounded), accounts for every task, then applies
  // completed writes to the history and verifies completed reads. False to stop.
  auto run_batch = [&](const std::vector<Op>& ops) {
    std::vector<TransferRequest> requests;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      unsigned char* slot = local.data() + i * kMaxOp;
      if (op.opcode == OpCode::kWrite) {
        FillPattern(op.key, op.off, slot, op.len);
      } else {
        std::memset(slot, 0xdb, op.len);  // a read that moves nothing shows
      }
      const Peer& peer = peers_[op.target];
      requests.push_back({op.opcode, slot, targets_[op.target],
                          peer.addr + uint64_t(t) * kRange + op.off, op.len});
    }
    Result<BatchId> batch = engine_.allocateBatchID(requests.size());
    if (!batch.ok()) {
      Report("allocateBatchID: " + batch.status().ToString());
      return false;
    }
    Status s = engine_.submitTransfer(*batch, requests);
    if (!s.ok()) {
      Report("submitTransfer: " + s.ToString());
      return false;
    }
    counters_.submitted += requests.size();
    Result<BatchStatus> summary = engine_.waitBatch(*batch, kWaitBound);
    if (!summary.ok()) {
      std::string open;
      for (size_t i = 0; i < ops.size(); ++i) {
        Result<TransferStatus> ts = engine_.getTransferStatus(*batch, i);
        open += " [" + std::to_string(i) + " " +
                (ts.ok() ? std::string(TransferStateName(ts->state)) + " via " + ts->transport
                         : ts.status().ToString()) +
                "]";
      }
      Report("thread " + std::to_string(t) + ": waitBatch: " + summary.status().ToString() +
             "; tasks:" + open);
      return false;  // the batch stays allocated: freeing it would be refused while tasks run
    }
    counters_.completed += summary->completed;
    counters_.failed += summary->failed;
    uint64_t batch_bytes = 0;
    bool ok = summary->completed + summary->failed == ops.size();
    if (!ok) {
      Report("batch of " + std::to_string(ops.size()) + " ended with " +
             std::to_string(summary->completed) + " completed + " +
             std::to_string(summary->failed) + " failed");
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      Result<TransferStatus> ts = engine_.getTransferStatus(*batch, i);
      if (!ts.ok()) {
        Report("getTransferStatus: " + ts.status().ToString());
        ok = false;
        continue;
      }
      const std::string where =
          "thread " + std::to_string(t) + " target " + std::to_string(op.target) + " " +
          (op.opcode == OpCode::kWrite ? "write" : "read") + " [" + std::to_string(op.off) + ", +" +
          std::to_string(op.len) + ") via " + ts->transport;
      std::atomic<uint64_t>& by = ts->transport == "tcp"   ? counters_.by_tcp
                                  : ts->transport == "shm" ? counters_.by_shm
                                                           : counters_.by_other;
      ++by;
      if (ts->state != TransferState::kCompleted) {
        Report(where + ": " + std::string(TransferStateName(ts->state)) + ": " +
               ts->reason.ToString());
        if (op.opcode == OpCode::kWrite) history_[t][op.target].Assign(op.off, op.len, kUnknown);
        ok = false;
        continue;
      }
      if (ts->transferred_bytes != op.len) {
        Report(where + ": completed with " + std::to_string(ts->transferred_bytes) + " bytes");
        ok = false;
      }
      batch_bytes += op.len;
      if (op.opcode == OpCode::kWrite) {
        history_[t][op.target].Assign(op.off, op.len, op.key);
        continue;
      }
      const unsigned char* got = local.data() + i * kMaxOp;
      if (!history_[t][op.target].Expected(op.off, op.len, expected.data())) continue;
      if (std::memcmp(got, expected.data(), op.len) != 0) {
        uint64_t first = 0;
        while (got[first] == expected[first]) ++first;
        char detail[160];
        std::snprintf(detail, sizeof detail,
                      ": byte %" PRIu64 " of the range is %u, expected %u (pieces %zu)",
                      op.off + first, got[first], expected[first], history_[t][op.target].pieces());
        Report(where + detail);
        ok = false;
      } else {
        ++counters_.reads_verified;
      }
    }
    if (summary->transferred_bytes != batch_bytes) {
      Report("batch transferred " + std::to_string(summary->transferred_bytes) + " bytes, " +
             std::to_string(batch_bytes) + " completed");
      ok = false;
    }
    counters_.bytes += batch_bytes;
    Status freed = engine_.freeBatchID(*batch);
    if (!freed.ok()) {
      Report("freeBatchID after every task ended: " + freed.ToString());
      ok = false;
    }
    return ok;
  };

  // Fill: every byte of every range gets a write of this thread, so the targets' memory is
  // resident before the warm-up ends.
  for (int target = 0; target < kTargets && !stop_; ++target) {
    std::vector<Op> fill;
    for (uint64_t off = 0; off < kRange; off += kRange / kDepth) {
      fill.push_back({OpCode::kWrite, target, off, kRange / kDepth, WriteKey(t, ++seq)});
    }
    if (!run_batch(fill)) break;
  }

  std::uniform_real_distribution<double> log_len(std::log(double(kMinOp)),
                                                 std::log(double(kMaxOp)));
  int batches = 0;
  while (!stop_ && std::chrono::steady_clock::now().time_since_epoch().count() < stop_at_) {
    std::vector<Op> ops;
    const int n = 1 + int(rng() % kDepth);
    for (int i = 0; i < n; ++i) {
      Op op;
      op.opcode = rng() % 2 == 0 ? OpCode::kRead : OpCode::kWrite;
      op.target = int(rng() % kTargets);
      op.len = std::clamp<uint64_t>(uint64_t(std::exp(log_len(rng))), kMinOp, kMaxOp);
      op.off = rng() % (kRange - op.len + 1);
      op.key = op.opcode == OpCode::kWrite ? WriteKey(t, ++seq) : 0;
      // Two tasks of one batch never overlap in a target: their order is not defined.
      const bool overlaps = std::any_of(ops.begin(), ops.end(), [&](const Op& o) {
        return o.target == op.target && o.off < op.off + op.len && op.off < o.off + o.len;
      });
      if (!overlaps) ops.push_back(op);
    }
    if (!run_batch(ops)) break;
    if (++batches == kWarmupBatches) ++warmed_;
  }
  if (batches < kWarmupBatches) ++warmed_;  // stopped early: do not keep the main thread waiting
  load_ended_[t] = std::chrono::steady_clock::now();

  // What each of this thread's ranges should hold now, for the final check (the threads add up
  // in parallel; the targets are asked once every thread is done).
  for (int target = 0; target < kTargets; ++target) {
    if (history_[t][target].Expected(0, kRange, expected.data())) {
      final_sums_[t][target] = Fnv(expected.data(), kRange);
    }
  }
}

TEST_F(LoadTest, ThreadsTargetsAndTransportsUnderMixedLoad) {
  const auto duration = kSanitized ? 3s : 8s;
  const auto set_up = std::chrono::steady_clock::now();
  EngineOptions options;
  options.task_timeout = kTaskTimeout;
  ASSERT_TRUE(engine_.init(options).ok());
  for (int i = 0; i < kTargets; ++i) peers_.push_back(SpawnPeer(i));
  for (Peer& peer : peers_) {
    ASSERT_TRUE(ReadyPeer(peer));
    Result<SegmentId> target = engine_.openSegment(peer.name);
    ASSERT_TRUE(target.ok()) << target.status();
    targets_.push_back(*target);
  }
  history_.assign(kThreads, std::vector<RangeHistory>(kTargets));
  local_.assign(kThreads, std::vector<unsigned char>(kDepth * kMaxOp));
  expected_.assign(kThreads, std::vector<unsigned char>(kRange));
  load_ended_.resize(kThreads);
  final_sums_.assign(kThreads, std::vector<std::optional<uint64_t>>(kTargets));

  const auto started = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([this, t] { RunThread(t); });

  // Warmed up: every thread filled its ranges and ran a few batches; connections, grant
  // channels, mappings and pools exist. Measure from here.
  const bool warmed = WaitFor([&] { return warmed_.load() == kThreads || stop_; }, 120s, 10ms);
  const auto measured_from = std::chrono::steady_clock::now();
  const uint64_t rss_warm = ResidentBytes();
  const size_t fds_warm = OpenFds();
  std::vector<uint64_t> peer_rss_warm;
  for (Peer& p : peers_) peer_rss_warm.push_back(ResidentBytes(std::to_string(p.process->pid())));
  const uint64_t ops_warm = counters_.completed.load();
  const uint64_t bytes_warm = counters_.bytes.load();
  stop_at_ = (measured_from + duration).time_since_epoch().count();
  if (!warmed) Report("the threads did not warm up within 120 s");
  for (std::thread& th : threads) th.join();
  const auto ended = *std::max_element(load_ended_.begin(), load_ended_.end());
  const uint64_t rss_end = ResidentBytes();
  const size_t fds_end = OpenFds();
  std::vector<uint64_t> peer_rss_end;
  for (Peer& p : peers_) peer_rss_end.push_back(ResidentBytes(std::to_string(p.process->pid())));

  // Every completion accounted for, none failed.
  {
    MutexLock lock(mu_);
    for (const std::string& m : messages_) ADD_FAILURE() << m;
    EXPECT_EQ(problems_, 0);
  }
  EXPECT_EQ(counters_.submitted.load(), counters_.completed.load() + counters_.failed.load());
  EXPECT_EQ(counters_.failed.load(), 0u);
  EXPECT_EQ(counters_.by_tcp + counters_.by_shm + counters_.by_other, counters_.submitted.load());
  // Both transports carried load (tcp to the tcp-only targets, shm to the others).
  EXPECT_GT(counters_.by_tcp.load(), 0u);
  EXPECT_GT(counters_.by_shm.load(), 0u);
  EXPECT_EQ(counters_.by_other.load(), 0u);
  EXPECT_GT(counters_.reads_verified.load(), 0u);

  // Every byte of every range, as the target holds it ("sum"). All the questions go out first,
  // so the targets add up in parallel.
  for (int target = 0; target < kTargets; ++target) {
    for (int t = 0; t < kThreads; ++t) {
      ASSERT_TRUE(peers_[target]
                      .process
                      ->WriteLine("sum " + std::to_string(uint64_t(t) * kRange) + " " +
                                  std::to_string(kRange))
                      .ok());
    }
  }
  for (int target = 0; target < kTargets; ++target) {
    for (int t = 0; t < kThreads; ++t) {
      Result<std::string> reply = peers_[target].process->ReadLine(60s);
      ASSERT_TRUE(reply.ok()) << reply.status() << "\n" << peers_[target].process->LogTail();
      if (!final_sums_[t][target]) continue;
      char want[40];
      std::snprintf(want, sizeof want, "sum %" PRIx64, *final_sums_[t][target]);
      EXPECT_EQ(*reply, want) << "thread " << t << "'s range in target " << target;
    }
  }

  const auto verified = std::chrono::steady_clock::now();
  auto secs = [](auto d) { return std::chrono::duration<double>(d).count(); };
  const double seconds = secs(ended - measured_from);
  const uint64_t ops = counters_.completed.load() - ops_warm;
  const double gb = double(counters_.bytes.load() - bytes_warm) / 1e9;
  double peer_growth = 0;
  for (size_t i = 0; i < peers_.size(); ++i) {
    peer_growth = std::max(peer_growth, double(peer_rss_end[i]) - double(peer_rss_warm[i]));
  }
  const double rss_growth = double(rss_end) - double(rss_warm);
  std::printf(
      "[load] start %.1f s, warm-up %.1f s, measured %.1f s, final check %.1f s; RSS self %.1f -> "
      "%.1f MiB, peers' largest growth %.1f MiB; fds %zu -> %zu\n",
      secs(started - set_up), secs(measured_from - started), seconds, secs(verified - ended),
      MiB(rss_warm), MiB(rss_end), MiB(peer_growth), fds_warm, fds_end);
  std::printf("load_test%s: %d threads x %d targets (2 tcp, 2 shm), r/w 4 KiB-4 MiB, seed %" PRIu64
              ": %" PRIu64 " ops in %.1f s (%.0f ops/s), %.2f GB (%.2f GB/s); all %" PRIu64
              " tasks accounted (%" PRIu64 " tcp, %" PRIu64 " shm), %" PRIu64
              " failed; RSS +%.1f MiB after warm-up\n",
              kSanitized ? " (sanitized)" : "", kThreads, kTargets, seed_, ops, seconds,
              double(ops) / seconds, gb, gb / seconds, counters_.submitted.load(),
              counters_.by_tcp.load(), counters_.by_shm.load(), counters_.failed.load(),
              MiB(std::max(0.0, rss_growth)));
  if (!kSanitized) {  // ASan's quarantine keeps freed memory resident on purpose
    EXPECT_LT(rss_growth, double(kRssBound))
        << "this process grew from " << rss_warm << " to " << rss_end << " bytes";
    EXPECT_LT(peer_growth, double(kRssBound)) << "a target process grew by " << peer_growth;
  }
  EXPECT_LE(fds_end, fds_warm + 64) << "open descriptors grew under a steady load";
}

}  // namespace
}  // namespace ferry
