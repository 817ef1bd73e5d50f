// The engine core's promises with engines in this process: publication ends with the
// registry's latest state, notifications are capped, links and their resources go when
// segments close, and rpc_meta is written once against a server without TTLs.
#include <sys/resource.h>
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "common/mutex.h"
#include "common/sanitizers.h"
#include "common/wait_for.h"
#include "core/segment_desc_codec.h"
#include "ferry/transfer_engine.h"
#include "metadata/segment_directory.h"
#include "metadata/store_factory.h"
#include "test_servers.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

size_t CountDirEntries(const char* path) {
  size_t n = 0;
  if (DIR* d = opendir(path)) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    closedir(d);
  }
  return n;
}

// File-backed mappings (a non-zero inode: files, memfds of peers' shared buffers). Anonymous
// ones are left out: glibc keeps the stacks and malloc arenas of exited threads mapped.
size_t CountFileMappings(const char* path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode;
    fields >> range >> perms >> offset >> dev >> inode;
    if (!inode.empty() && inode != "0") ++n;
  }
  return n;
}

size_t ResidentBytes() {
  std::ifstream in("/proc/self/statm");
  size_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

struct Resources {
  size_t fds = 0, threads = 0, maps = 0;
  static Resources Now() {
    return {CountDirEntries("/proc/self/fd"), CountDirEntries("/proc/self/task"),
            CountFileMappings("/proc/self/maps")};
  }
  bool AtMost(const Resources& o) const {
    return fds <= o.fds && threads <= o.threads && maps <= o.maps;
  }
};

std::ostream& operator<<(std::ostream& os, const Resources& r) {
  return os << r.fds << " fds, " << r.threads << " threads, " << r.maps << " file mappings";
}


TEST(EngineCoreTest, ConcurrentRegistrationsPublishTheRegistrysLatestState) {
  for (int rep = 0; rep < 20; ++rep) {
    const std::string conn = "memory://publish-" + std::to_string(rep);
    EngineOptions options;
    options.metadata_conn = conn;
    options.local_server_name = "pub";
    options.transports = {"tcp"};
    TransferEngine engine;
    ASSERT_TRUE(engine.init(options).ok());
    Result<std::unique_ptr<MetadataStore>> reader = CreateMetadataStore(conn, {});
    ASSERT_TRUE(reader.ok());
    constexpr int kThreads = 8;
    constexpr int kBuffers = 4;
    std::vector<std::vector<char>> memory(kThreads * kBuffers, std::vector<char>(4096));
    std::vector<std::vector<bool>> registered(kThreads, std::vector<bool>(kBuffers, false));
    std::atomic<bool> stop{false};
    std::thread watcher([&] {  // reads the store while it changes
      while (!stop.load()) (void)(*reader)->Get("ferry/ram/pub");
    });
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(rep * 100 + t);
        for (int op = 0; op < 40; ++op) {
          const int b = static_cast<int>(rng() % kBuffers);
          char* addr = memory[t * kBuffers + b].data();
          if (registered[t][b]) {
            ASSERT_TRUE(engine.unregisterLocalMemory(addr).ok());
          } else {
            ASSERT_TRUE(engine.registerLocalMemory(addr, 4096, "cpu").ok());
          }
          registered[t][b] = !registered[t][b];
        }
      });
    }
    for (auto& t : threads) t.join();
    stop = true;
    watcher.join();
    std::set<uint64_t> expected;
    for (int t = 0; t < kThreads; ++t) {
      for (int b = 0; b < kBuffers; ++b) {
        if (registered[t][b]) expected.insert(reinterpret_cast<uint64_t>(memory[t * kBuffers + b].data()));
      }
    }
    Result<std::string> stored = (*reader)->Get("ferry/ram/pub");
    ASSERT_TRUE(stored.ok()) << stored.status();
    Result<SegmentDesc> desc = DecodeSegmentDesc(*stored);
    ASSERT_TRUE(desc.ok()) << desc.status();
    std::set<uint64_t> published;
    for (const BufferDesc& b : desc->buffers) published.insert(b.addr);
    ASSERT_EQ(published, expected) << "repetition " << rep;
  }
}

TEST(EngineCoreTest, NotificationFloodGetsBusyAndTheReceiverStaysBounded) {
  EngineOptions receiver_options;
  receiver_options.transports = {"tcp"};
  receiver_options.max_pending_notifies = 100000;
  receiver_options.max_pending_notify_bytes = 4 << 20;
  TransferEngine receiver;
  ASSERT_TRUE(receiver.init(receiver_options).ok());
  TransferEngine sender;
  EngineOptions sender_options;
  sender_options.transports = {"tcp"};
  ASSERT_TRUE(sender.init(sender_options).ok());
  Result<SegmentId> target = sender.openSegment(receiver.localSegmentName());
  ASSERT_TRUE(target.ok());
  const std::string payload(256 << 10, 'n');
  const size_t rss_before = ResidentBytes();
  int accepted = 0;
  int busy = 0;
  for (int i = 0; i < 1000; ++i) {  // 250 MiB offered
    Status s = sender.sendNotify(*target, {"", payload});
    if (s.ok()) {
      ++accepted;
    } else {
      ASSERT_EQ(s.code(), StatusCode::kBusy) << s;
      ++busy;
    }
  }
  // 4 MiB of 256 KiB payloads (plus the sender's name): 15 fit, the rest are refused, and the
  // receiver (this process) grew by about the cap, not by what was offered.
  EXPECT_EQ(accepted, 15);
  EXPECT_EQ(busy, 1000 - 15);
  const size_t rss_after = ResidentBytes();
  if (!kSanitized) {  // ASan's quarantine keeps freed memory resident on purpose
    EXPECT_LT(rss_after, rss_before + (64 << 20))
        << "resident memory grew from " << rss_before << " to " << rss_after << " bytes";
  }
  std::vector<NotifyMessage> got = receiver.getNotifies();
  EXPECT_EQ(got.size(), 15u);
  EXPECT_TRUE(sender.sendNotify(*target, {"", "after taking"}).ok());  // room again
  got = receiver.getNotifies();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, "after taking");
  EXPECT_EQ(got[0].name, sender.localSegmentName());
}

// Captures what this process writes to stderr (the log facade's sink) while alive.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    saved_ = dup(2);
    std::snprintf(path_, sizeof(path_), "/tmp/ferry-stderr-XXXXXX");
    file_ = mkstemp(path_);
    dup2(file_, 2);
  }
  // Restores stderr and returns the lines written meanwhile.
  std::vector<std::string> Finish() {
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    close(file_);
    std::ifstream in(path_);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    unlink(path_);
    return lines;
  }

 private:
  int saved_ = -1;
  int file_ = -1;
  char path_[64];
};

TEST(EngineCoreTest, ADeadPeerLogsABoundedNumberOfLines) {
  // A peer that went away while thousands of tasks keep aiming at it: a few lines (it started
  // failing; summaries), not one per task, and no re-fetch storm.
  EngineOptions options;
  options.transports = {"tcp"};
  options.request_timeout = 500ms;
  auto target = std::make_unique<TransferEngine>();
  ASSERT_TRUE(target->init(options).ok());
  std::vector<char> remote(1 << 16);
  ASSERT_TRUE(target->registerLocalMemory(remote.data(), remote.size(), "cpu").ok());
  TransferEngine initiator;
  ASSERT_TRUE(initiator.init(options).ok());
  std::vector<char> local(1 << 16);
  ASSERT_TRUE(initiator.registerLocalMemory(local.data(), local.size(), "cpu").ok());
  Result<SegmentId> seg = initiator.openSegment(target->localSegmentName());
  ASSERT_TRUE(seg.ok());
  target.reset();  // gone: its port refuses connections from now on

  StderrCapture capture;
  int failed = 0;
  for (int round = 0; round < 250; ++round) {
    std::vector<TransferRequest> requests;
    for (int i = 0; i < 8; ++i) {
      requests.push_back({OpCode::kWrite, local.data() + i * 4096, *seg,
                          reinterpret_cast<uint64_t>(remote.data()) + i * 4096, 4096});
    }
    Result<BatchId> batch = initiator.allocateBatchID(requests.size());
    if (!batch.ok() || !initiator.submitTransfer(*batch, requests).ok()) break;
    Result<BatchStatus> s = initiator.waitBatch(*batch, 10s);
    if (s.ok() && s->state == TransferState::kFailed) ++failed;
    (void)initiator.freeBatchID(*batch);
  }
  const std::vector<std::string> lines = capture.Finish();
  EXPECT_EQ(failed, 250);
  EXPECT_LE(lines.size(), 10u) << "first line: " << (lines.empty() ? "" : lines[0]);
}

class LinkLifetimeTest : public ::testing::TestWithParam<const char*> {};

TEST_P(LinkLifetimeTest, OpenTransferCloseAThousandTimesReturnsToTheBaseline) {
  // 1,000 rounds of open, write, close over 20 targets the initiator had never reached when the
  // baseline was taken (a 21st one warms it up). Every link a round made is released by
  // closeSegment, so fds, threads and mappings come back to where they were; links kept past
  // their close would hold 20 peers' connections (and, for shm, mappings).
  constexpr int kTargets = 21;
  EngineOptions options;
  options.transports = {GetParam()};
  options.idle_link_timeout = 0ms;  // only closeSegment releases links here
  std::vector<std::unique_ptr<TransferEngine>> targets;
  // Over shm the targets' buffers are managed (memfd) buffers: the initiator maps each one, and
  // closing the segment must unmap it.
  const bool managed = std::string(GetParam()) == "shm";
  std::vector<std::vector<char>> plain_memory(kTargets, std::vector<char>(1 << 16));
  std::vector<char*> target_memory(kTargets);
  for (int i = 0; i < kTargets; ++i) {
    targets.push_back(std::make_unique<TransferEngine>());
    ASSERT_TRUE(targets[i]->init(options).ok());
    if (managed) {
      Result<void*> buffer = targets[i]->allocateManagedBuffer(1 << 16);
      ASSERT_TRUE(buffer.ok()) << buffer.status();
      target_memory[i] = static_cast<char*>(*buffer);
    } else {
      target_memory[i] = plain_memory[i].data();
      ASSERT_TRUE(targets[i]->registerLocalMemory(target_memory[i], 1 << 16, "cpu").ok());
    }
  }
  TransferEngine initiator;
  ASSERT_TRUE(initiator.init(options).ok());
  std::vector<char> local(1 << 16);
  ASSERT_TRUE(initiator.registerLocalMemory(local.data(), local.size(), "cpu").ok());

  auto round = [&](int i) {
    TransferEngine& target = *targets[i];
    Result<SegmentId> seg = initiator.openSegment(target.localSegmentName());
    ASSERT_TRUE(seg.ok()) << seg.status();
    std::memset(local.data(), i & 0xff, 4096);
    const uint64_t remote = reinterpret_cast<uint64_t>(target_memory[i]);
    Result<BatchId> batch = initiator.allocateBatchID(1);
    ASSERT_TRUE(batch.ok());
    ASSERT_TRUE(initiator.submitTransfer(*batch, {{OpCode::kWrite, local.data(), *seg, remote, 4096}}).ok());
    Result<BatchStatus> s = initiator.waitBatch(*batch, 10s);
    ASSERT_TRUE(s.ok());
    ASSERT_EQ(s->state, TransferState::kCompleted) << s->first_error;
    ASSERT_TRUE(initiator.freeBatchID(*batch).ok());
    ASSERT_TRUE(initiator.closeSegment(*seg).ok());
  };
  // Warm-up on target 0: threads and caches that live for the engine's life start.
  round(0);
  round(0);
  if (HasFatalFailure()) return;
  const Resources baseline = Resources::Now();
  for (int i = 0; i < 1000; ++i) {
    round(1 + i % (kTargets - 1));
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(std::memcmp(target_memory[1 + 999 % (kTargets - 1)], local.data(), 4096), 0);
  Resources now;
  const bool back = WaitFor([&] { return (now = Resources::Now()).AtMost(baseline); }, 20s);
  EXPECT_TRUE(back) << "baseline " << baseline << ", now " << now;
}

INSTANTIATE_TEST_SUITE_P(Transports, LinkLifetimeTest, ::testing::Values("tcp", "shm"));

TEST(EngineCoreTest, AServerWithoutTtlsGetsRpcMetaOnceAndOnlyChangedDescriptors) {
  testing::MooncakeStyleServer server;
  ASSERT_GT(server.port(), 0);
  EngineOptions options;
  options.metadata_conn = "http://127.0.0.1:" + std::to_string(server.port()) + "/metadata";
  options.local_server_name = "mooncake-peer";
  options.transports = {"tcp"};
  options.lease_ttl = 1s;  // a refresh every ~333 ms, if there were one
  TransferEngine engine;
  Status init = engine.init(options);
  ASSERT_TRUE(init.ok()) << init;
  std::vector<std::vector<char>> buffers(10, std::vector<char>(4096));
  for (auto& b : buffers) {
    Status s = engine.registerLocalMemory(b.data(), b.size(), "cpu");
    ASSERT_TRUE(s.ok()) << s;  // used to fail: the second rpc_meta PUT got 400
  }
  // Publishing an unchanged registry writes nothing.
  ASSERT_TRUE(engine.registerLocalMemory(buffers[0].data(), 4096, "cpu", true, false).code() ==
              StatusCode::kAlreadyExists);
  EXPECT_EQ(server.puts("ferry/rpc_meta/mooncake-peer"), 1);
  EXPECT_EQ(server.puts("ferry/ram/mooncake-peer"), 11);  // init + one per registration
  EXPECT_EQ(server.puts_with_ttl(), 0);
  // A peer reads it back through the same server.
  TransferEngine reader;
  EngineOptions reader_options = options;
  reader_options.local_server_name = "reader";
  ASSERT_TRUE(reader.init(reader_options).ok());
  Result<SegmentId> seg = reader.openSegment("mooncake-peer");
  EXPECT_TRUE(seg.ok()) << seg.status();
}

}  // namespace
}  // namespace ferry
