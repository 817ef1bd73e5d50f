// ferry-file-bench: ferry's file transport, driven through the facade, in the shape of
// ferry-raw-file-baseline (bench/file.sh runs both in one go and prints the ratio). No raw
// io_uring here: an engine (transports tcp and file, EngineOptions::file_queue_depth = --qd)
// registers --file as a file buffer and a page-aligned memory buffer, and moves --block_size
// blocks at random block-aligned offsets of the file (the baseline's seeded sequence) between
// the two, as kBatches batches of --qd requests each kept in flight: the ring holds qd I/Os
// (as the baseline keeps), the other requests wait behind them, so the ring stays full while
// a finished batch is checked and submitted again. Requests are aligned, so the file transport takes O_DIRECT
// where the file allows (--direct=0: EngineOptions::file_direct_io off); every task's file_io
// is checked to be the expected one and every task to have completed.
//
//   ferry-file-bench --file=PATH [--operation=read|write] [--block_size=64K] [--qd=8]
//                    [--duration=2] [--direct=1]
//   {"kind":"ferry_file","operation":"read","block_size":65536,"qd":8,"direct":true,
//    "gbps":...,"ops_per_s":...,"bytes":...,"seconds":...}
//
// Exit status: 0 success, 1 a failed call or task, 2 bad flags.
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ferry/transfer_engine.h"
#include "file_bench_flags.h"

namespace {

using namespace std::chrono_literals;

constexpr unsigned kBatches = 4;

int Fail(const std::string& what, const ferry::Status& s) {
  std::fprintf(stderr, "ferry-file-bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  ferry::file_bench::Flags flags;
  if (!ferry::file_bench::ParseFlags(argc, argv, "ferry-file-bench", &flags)) return 2;
  const std::string& path = flags.path;
  const std::string& operation = flags.operation;
  const uint64_t block = flags.block;
  const unsigned qd = flags.qd;
  const double duration = flags.duration;
  const bool direct = flags.direct;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "ferry-file-bench: stat %s: %s\n", path.c_str(), std::strerror(errno));
    return 1;
  }
  const auto file_size = static_cast<uint64_t>(st.st_size);
  const uint64_t blocks = file_size / block;
  if (blocks == 0) {
    std::fprintf(stderr, "ferry-file-bench: file smaller than one block\n");
    return 1;
  }

  ferry::EngineOptions options;
  options.metadata_conn = "P2PHANDSHAKE";
  options.host = "127.0.0.1";
  options.transports = {"tcp", "file"};
  options.file_queue_depth = qd;
  options.file_direct_io = direct;
  ferry::TransferEngine engine;
  if (ferry::Status s = engine.init(options); !s.ok()) return Fail("init", s);
  ferry::Result<uint64_t> file = engine.registerLocalFile(path, file_size);
  if (!file.ok()) return Fail("registerLocalFile", file.status());
  ferry::Result<ferry::SegmentId> self = engine.openSegment(engine.localSegmentName());
  if (!self.ok()) return Fail("openSegment", self.status());
  const size_t memory_size = kBatches * qd * block;
  auto* memory = static_cast<uint8_t*>(std::aligned_alloc(4096, memory_size));
  std::memset(memory, 0x3c, memory_size);
  if (ferry::Status s = engine.registerLocalMemory(memory, memory_size); !s.ok()) {
    return Fail("registerLocalMemory", s);
  }
  const ferry::OpCode op = operation == "write" ? ferry::OpCode::kWrite : ferry::OpCode::kRead;
  std::mt19937_64 rng(42);
  auto requests = [&](unsigned half) {
    std::vector<ferry::TransferRequest> out;
    for (unsigned i = 0; i < qd; ++i) {
      const uint64_t offset = (rng() % blocks) * block;
      out.push_back({op, memory + (half * qd + i) * block, *self, *file + offset, block});
    }
    return out;
  };
  ferry::BatchId batches[kBatches] = {};
  for (auto& b : batches) {
    ferry::Result<ferry::BatchId> id = engine.allocateBatchID(qd);
    if (!id.ok()) return Fail("allocateBatchID", id.status());
    b = *id;
  }
  const std::string expected_io = direct ? "direct" : "buffered";
  // Checks every task of `half`'s batch (and the first one's file_io), then frees and reallocates.
  auto settle = [&](unsigned half, bool check_io) -> int {
    ferry::Result<ferry::BatchStatus> done = engine.waitBatch(batches[half], 30s);
    if (!done.ok()) return Fail("waitBatch", done.status());
    if (done->state != ferry::TransferState::kCompleted) {
      return Fail("a transfer did not complete", done->first_error);
    }
    if (check_io) {
      ferry::Result<ferry::TransferStatus> t = engine.getTransferStatus(batches[half], 0);
      if (!t.ok() || t->file_io != expected_io) {
        std::fprintf(stderr, "ferry-file-bench: moved %s, expected %s\n",
                     t.ok() ? t->file_io.c_str() : "?", expected_io.c_str());
        return 1;
      }
    }
    if (ferry::Status s = engine.freeBatchID(batches[half]); !s.ok()) return Fail("free", s);
    ferry::Result<ferry::BatchId> id = engine.allocateBatchID(qd);
    if (!id.ok()) return Fail("allocateBatchID", id.status());
    batches[half] = *id;
    return 0;
  };
  for (unsigned h = 0; h < kBatches; ++h) {
    if (ferry::Status s = engine.submitTransfer(batches[h], requests(h)); !s.ok()) {
      return Fail("submitTransfer", s);
    }
  }
  uint64_t ops = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto stop = start + std::chrono::duration<double>(duration);
  auto now = start;
  for (unsigned half = 0; now < stop; half = (half + 1) % kBatches) {
    if (int rc = settle(half, ops == 0); rc != 0) return rc;
    ops += qd;
    if (ferry::Status s = engine.submitTransfer(batches[half], requests(half)); !s.ok()) {
      return Fail("submitTransfer", s);
    }
    now = std::chrono::steady_clock::now();
  }
  const double seconds = std::chrono::duration<double>(now - start).count();
  for (unsigned h = 0; h < kBatches; ++h) {
    if (int rc = settle(h, false); rc != 0) return rc;
  }
  const double bytes = static_cast<double>(ops) * static_cast<double>(block);
  std::printf(
      "{\"kind\":\"ferry_file\",\"operation\":\"%s\",\"block_size\":%llu,\"qd\":%u,"
      "\"direct\":%s,\"gbps\":%.4f,\"ops_per_s\":%.1f,\"bytes\":%.0f,\"seconds\":%.3f}\n",
      operation.c_str(), static_cast<unsigned long long>(block), qd, direct ? "true" : "false",
      bytes / seconds / 1e9, ops / seconds, bytes, seconds);
  return 0;
}
