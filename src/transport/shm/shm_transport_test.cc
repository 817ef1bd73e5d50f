// ShmTransport within one process (process_vm_writev to one's own pid works): lifecycle, keys,
// both copy paths, batching, refusals, back-pressure and Stop. Across processes:
// shm_process_test.cc.
#include "transport/shm/shm_transport.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test_servers.h"
#include "transport/conformance/test_context.h"
#include "transport/shm/shm_cma.h"
#include "transport/shm/shm_encoding.h"
#include "transport/shm/shm_test_pattern.h"
#include "common/wait_for.h"

// A namespace of its own: a unity build compiles this file with the other tests of its target,
// whose helpers (kWait, kTargetIncarnation, ...) differ.
namespace ferry::shm_transport_test {
namespace {

using std::chrono::milliseconds;
using transport_testing::SliceBatch;
using transport_testing::TestContext;

constexpr uint64_t kTargetIncarnation = 0xa11ce;
constexpr milliseconds kWait{10000};
constexpr size_t kMiB = size_t{1} << 20;
// Slices keep a string_view of their key: keys outlive them.
const std::string kCmaKey = "cma";
const std::string kBadKey = "mapped:x";

uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

// A Unix socket at `path` that accepts connections (through the backlog) and never answers;
// -1 when it cannot be made.
int SilentListener(const std::string& path) {
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener, 16) != 0) {
    ::close(listener);
    return -1;
  }
  return listener;
}

// True once a connection waits in `listener`'s backlog (an initiator connected), by `timeout`.
bool WaitConnectionPending(int listener, milliseconds timeout) {
  pollfd p{listener, POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1;
}

// Open file descriptors and mappings of this process.
size_t OpenFds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}
// Lines of /proc/self/maps that map a file (a peer's memfd buffer is one). Anonymous lines are
// left out: glibc keeps thread stacks and malloc arenas of exited threads for reuse, and how
// many depends on how the threads overlapped, not on what the links hold.
size_t FileMappings() {
  std::ifstream maps("/proc/self/maps");
  size_t n = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find(" /") != std::string::npos) ++n;
  }
  return n;
}

class ShmTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<testing::TempDir> dir = testing::TempDir::Create("shm-test");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<testing::TempDir>(std::move(dir).value());
  }
  void TearDown() override {
    if (initiator_) initiator_->Stop();
    if (target_) target_->Stop();
    for (void* p : shared_) target_->FreeShared(p).IgnoreError();
  }

  ShmTransportOptions Options() {
    ShmTransportOptions o;
    o.socket_dir = dir_->path();
    o.io_timeout = milliseconds(3000);
    return o;
  }

  // `target_leases`: the target's ShmTransportOptions::lease_table_entries.
  void StartBoth(ShmTransportOptions initiator_options = {}, size_t target_leases = 4096) {
    ShmTransportOptions target_options = Options();
    target_options.lease_table_entries = target_leases;
    target_ = std::make_unique<ShmTransport>(target_options);
    Result<std::string> published = target_->Start(&target_ctx_, {"target", ""});
    ASSERT_TRUE(published.ok()) << published.status();
    published_ = *published;
    if (initiator_options.socket_dir == ShmTransportOptions{}.socket_dir) {
      initiator_options.socket_dir = dir_->path();
    }
    initiator_ = std::make_unique<ShmTransport>(initiator_options);
    ASSERT_TRUE(initiator_->Start(&initiator_ctx_, {"initiator", ""}).ok());
    SegmentDesc desc;
    desc.name = "target";
    desc.incarnation = kTargetIncarnation;
    desc.transports["shm"] = published_;
    Result<std::shared_ptr<PeerLink>> link = initiator_->Connect(desc);
    ASSERT_TRUE(link.ok()) << link.status();
    link_ = *link;
  }

  // Target memory registered with the target transport and its context (generation 1).
  uint8_t* TargetRegion(size_t length, bool shared, std::string* key) {
    uint8_t* p = nullptr;
    if (shared) {
      Result<void*> memory = target_->AllocateShared(length, Location::Cpu());
      EXPECT_TRUE(memory.ok()) << memory.status();
      if (!memory.ok()) return nullptr;
      p = static_cast<uint8_t*>(*memory);
      shared_.push_back(p);
    } else {
      heap_.push_back(std::make_unique<uint8_t[]>(length));
      p = heap_.back().get();
    }
    std::memset(p, 0, length);
    Result<std::string> k =
        target_->RegisterMemory(Addr(p), length, Location::Cpu(), MemoryAccess::kRemote);
    EXPECT_TRUE(k.ok()) << k.status();
    *key = k.value_or("");
    target_ctx_.AddRegion(p, length, 1, true, "shm");
    return p;
  }

  Slice Make(OpCode op, const void* local, const void* remote, size_t length,
             const std::string& key, uint64_t generation = 1) {
    Slice s;
    s.op = op;
    s.local_addr = Addr(local);
    s.remote_addr = Addr(remote);
    s.length = length;
    s.remote_generation = generation;
    s.peer_incarnation = kTargetIncarnation;
    s.remote_key = key;
    return s;
  }

  void RunAll(SliceBatch& batch) {
    ASSERT_TRUE(initiator_->Submit(*link_, batch.ptrs).ok());
    ASSERT_TRUE(initiator_ctx_.WaitAll(batch.ptrs, kWait));
  }

  // Writes a pattern over [0, length) in `slices` slices, reads it back, and compares.
  void WriteReadVerify(uint8_t* remote, size_t length, size_t slices, const std::string& key) {
    std::vector<uint8_t> src(length), back(length, 0);
    shm_test::FillPattern(src.data(), length, 17);
    const size_t each = length / slices;
    SliceBatch write(&initiator_ctx_), read(&initiator_ctx_);
    for (size_t i = 0; i < slices; ++i) {
      const size_t n = i + 1 == slices ? length - i * each : each;
      write.Add(Make(OpCode::kWrite, &src[i * each], remote + i * each, n, key));
      read.Add(Make(OpCode::kRead, &back[i * each], remote + i * each, n, key));
    }
    RunAll(write);
    for (Slice* s : write.ptrs)
      ASSERT_TRUE(initiator_ctx_.StatusOf(s).ok()) << initiator_ctx_.StatusOf(s);
    ASSERT_EQ(0, std::memcmp(remote, src.data(), length));
    RunAll(read);
    for (Slice* s : read.ptrs)
      ASSERT_TRUE(initiator_ctx_.StatusOf(s).ok()) << initiator_ctx_.StatusOf(s);
    ASSERT_EQ(0, std::memcmp(back.data(), src.data(), length));
  }

  std::unique_ptr<testing::TempDir> dir_;
  TestContext target_ctx_{kTargetIncarnation};
  TestContext initiator_ctx_{0xb0b};
  std::unique_ptr<ShmTransport> target_;
  std::unique_ptr<ShmTransport> initiator_;
  std::string published_;
  std::shared_ptr<PeerLink> link_;
  std::vector<void*> shared_;
  std::vector<std::unique_ptr<uint8_t[]>> heap_;
};

TEST_F(ShmTransportTest, DescribesItselfAndKeepsLifecycleRules) {
  ShmTransport shm(Options());
  EXPECT_EQ(shm.name(), "shm");
  EXPECT_FALSE(shm.capabilities().reaches_other_hosts);
  EXPECT_FALSE(shm.capabilities().reaches_device_memory);
  EXPECT_TRUE(shm.capabilities().allocates_shared_memory);
  EXPECT_EQ(shm.Connect(SegmentDesc{}).status().code(), StatusCode::kBusy);
  EXPECT_EQ(shm.OnExchange("x").status().code(), StatusCode::kInvalidArgument);
  Result<std::string> published = shm.Start(&target_ctx_, {"a", ""});
  ASSERT_TRUE(published.ok()) << published.status();
  Result<shm::PeerAddress> address = shm::DecodePeerAddress(*published);
  ASSERT_TRUE(address.ok()) << *published;
  EXPECT_EQ(address->pid, ::getpid());
  EXPECT_EQ(address->socket_path.rfind(dir_->path() + "/ferry-shm-", 0), 0u);
  EXPECT_EQ(::access(address->socket_path.c_str(), F_OK), 0);
  EXPECT_EQ(shm.Start(&target_ctx_, {"a", ""}).status().code(), StatusCode::kBusy);
  shm.Stop();
  shm.Stop();
  EXPECT_NE(::access(address->socket_path.c_str(), F_OK), 0) << "socket file left behind";
  EXPECT_EQ(shm.Start(&target_ctx_, {"a", ""}).status().code(), StatusCode::kBusy);

  for (auto bad :
       {ShmTransportOptions{.workers = 0}, ShmTransportOptions{.workers = 65},
        ShmTransportOptions{.max_queued_slices = 0}, ShmTransportOptions{.socket_dir = ""},
        ShmTransportOptions{.socket_dir = dir_->path() + "/missing"}}) {
    ShmTransport invalid(bad);
    EXPECT_EQ(invalid.Start(&target_ctx_, {"a", ""}).status().code(), StatusCode::kInvalidArgument);
  }
}

// Start asks for PR_SET_PTRACER_ANY (letting any process of this user ptrace this one under
// Yama ptrace_scope 1) only when allow_same_user_ptrace is set. This kernel may have no Yama (the
// call then fails with EINVAL and changes nothing), so what is checked is whether it was asked.
TEST_F(ShmTransportTest, SameUserPtraceIsAskedForOnlyWhenAllowed) {
  ShmTransport allowed(Options());
  EXPECT_FALSE(allowed.stats().same_user_ptrace_requested);  // not started
  ASSERT_TRUE(allowed.Start(&target_ctx_, {"a", ""}).ok());
  EXPECT_TRUE(allowed.stats().same_user_ptrace_requested);
  ShmTransportOptions off = Options();
  off.allow_same_user_ptrace = false;
  ShmTransport refused(off);
  ASSERT_TRUE(refused.Start(&target_ctx_, {"b", ""}).ok());
  EXPECT_FALSE(refused.stats().same_user_ptrace_requested);
}

TEST_F(ShmTransportTest, KeysSayHowTheMemoryIsReached) {
  ShmTransport shm(Options());
  std::vector<uint8_t> heap(4096);
  EXPECT_EQ(
      shm.RegisterMemory(Addr(heap.data()), heap.size(), Location::Cpu(), MemoryAccess::kRemote)
          .value_or(""),
      "cma");
  EXPECT_EQ(
      shm.RegisterMemory(Addr(heap.data()), heap.size(), Location::Cuda(0), MemoryAccess::kRemote)
          .status()
          .code(),
      StatusCode::kNotFound);
  Result<void*> shared = shm.AllocateShared(3 * kMiB, Location::Cpu());
  ASSERT_TRUE(shared.ok()) << shared.status();
  const uint64_t base = Addr(*shared);
  Result<std::string> whole =
      shm.RegisterMemory(base, 3 * kMiB, Location::Cpu(), MemoryAccess::kRemote);
  Result<std::string> inner =
      shm.RegisterMemory(base + 4096, kMiB, Location::CpuNuma(0), MemoryAccess::kRemote);
  ASSERT_TRUE(whole.ok() && inner.ok());
  Result<shm::BufferKey> a = shm::DecodeBufferKey(*whole);
  Result<shm::BufferKey> b = shm::DecodeBufferKey(*inner);
  ASSERT_TRUE(a.ok() && b.ok()) << *whole << " " << *inner;
  EXPECT_TRUE(a->mapped);
  EXPECT_EQ(a->offset, 0u);
  EXPECT_EQ(a->buffer_length, 3 * kMiB);
  EXPECT_EQ(a->region_addr, base);
  EXPECT_EQ(b->buffer_id, a->buffer_id);
  EXPECT_EQ(b->offset, 4096u);
  EXPECT_EQ(b->region_addr, base + 4096);
  // Leaving the buffer: reached with process_vm_* instead.
  EXPECT_EQ(shm.RegisterMemory(base + 4096, 3 * kMiB, Location::Cpu(), MemoryAccess::kRemote)
                .value_or(""),
            "cma");
  EXPECT_TRUE(shm.UnregisterMemory(base, 3 * kMiB).ok());

  Result<void*> second = shm.AllocateShared(2 * kMiB, Location::Detect());  // huge-page sized
  ASSERT_TRUE(second.ok()) << second.status();
  std::memset(*second, 1, 2 * kMiB);
  Result<shm::BufferKey> c = shm::DecodeBufferKey(
      shm.RegisterMemory(Addr(*second), 10, Location::Cpu(), MemoryAccess::kRemote).value_or(""));
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->buffer_id, a->buffer_id);
  EXPECT_TRUE(shm.FreeShared(*second).ok());
  EXPECT_TRUE(shm.FreeShared(*shared).ok());
  EXPECT_EQ(shm.FreeShared(*shared).code(), StatusCode::kNotFound);
  EXPECT_EQ(shm.FreeShared(heap.data()).code(), StatusCode::kNotFound);
  EXPECT_EQ(shm.AllocateShared(0, Location::Cpu()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(shm.AllocateShared(4096, Location::Cuda(0)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ShmTransportTest, ConnectNamesThePeerWhenItsAddressIsMissingOrMalformed) {
  StartBoth();
  SegmentDesc desc;
  desc.name = "bob";
  Result<std::shared_ptr<PeerLink>> missing = initiator_->Connect(desc);
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("bob"), std::string::npos);
  for (const char* bad : {"nonsense", "v1:0:/x", "v1:12:relative", "v1:12"}) {
    desc.transports["shm"] = bad;
    Result<std::shared_ptr<PeerLink>> link = initiator_->Connect(desc);
    EXPECT_EQ(link.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(link.status().message().find("bob"), std::string::npos) << link.status();
  }
}

TEST_F(ShmTransportTest, CmaWritesAndReadsHeapMemory) {
  StartBoth();
  std::string key;
  uint8_t* remote = TargetRegion(4 * kMiB + 123, false, &key);
  ASSERT_EQ(key, "cma");
  WriteReadVerify(remote, 4 * kMiB + 123, 37, key);
  const ShmTransportStats stats = initiator_->stats();
  EXPECT_EQ(stats.cma_slices, 74u);
  EXPECT_EQ(stats.mapped_slices, 0u);
  // The first Submit's round trip leases the region; the second pins it through the target's
  // lease table, without a message.
  EXPECT_EQ(stats.grant_round_trips, 1u);
  EXPECT_EQ(stats.table_pinned_slices, 37u);
  EXPECT_TRUE(target_ctx_.WaitNoPins(kWait));
}

TEST_F(ShmTransportTest, MappedWritesAndReadsSharedBuffersAndFetchesTheFdOnce) {
  StartBoth();
  std::string key;
  uint8_t* remote = TargetRegion(4 * kMiB, true, &key);
  ASSERT_EQ(key.rfind("mapped:", 0), 0u) << key;
  WriteReadVerify(remote, 4 * kMiB, 64, key);
  WriteReadVerify(remote, 4 * kMiB, 3, key);
  const ShmTransportStats stats = initiator_->stats();
  EXPECT_EQ(stats.mapped_slices, 134u);
  EXPECT_EQ(stats.cma_slices, 0u);
  // Each worker may race to fetch once; the mapping is cached per buffer afterwards.
  EXPECT_GE(stats.fd_fetches, 1u);
  EXPECT_LE(stats.fd_fetches, 2u);
  EXPECT_TRUE(target_ctx_.WaitNoPins(kWait));
}

// Without a lease table (the socket path every batch takes then), as with one.
TEST_F(ShmTransportTest, LargeSubmitsShareGrantRoundTripsOfAtMost1024Ranges) {
  StartBoth(ShmTransportOptions{.workers = 1}, /*target_leases=*/0);
  std::string key;
  uint8_t* remote = TargetRegion(3000 * 64, false, &key);
  WriteReadVerify(remote, 3000 * 64, 3000, key);
  EXPECT_EQ(initiator_->stats().grant_round_trips, 6u);  // 3 per direction
}

TEST_F(ShmTransportTest, TargetRefusalsFailTheirSlicesOnly) {
  StartBoth();
  std::string cma_key, mapped_key;
  uint8_t* heap = TargetRegion(64 * 1024, false, &cma_key);
  uint8_t* shared = TargetRegion(64 * 1024, true, &mapped_key);
  std::vector<uint8_t> local(4096, 7);
  {  // warm the mapping so that a Stale answer has one to drop
    SliceBatch warm(&initiator_ctx_);
    warm.Add(Make(OpCode::kWrite, local.data(), shared, 4096, mapped_key));
    RunAll(warm);
    ASSERT_TRUE(initiator_ctx_.StatusOf(warm.ptrs[0]).ok());
  }
  std::vector<uint8_t> unregistered(4096);
  SliceBatch batch(&initiator_ctx_);
  Slice* good = batch.Add(Make(OpCode::kWrite, local.data(), heap, 4096, cma_key));
  Slice* stale = batch.Add(Make(OpCode::kWrite, local.data(), heap + 4096, 4096, cma_key, 2));
  Slice* stale_mapped = batch.Add(Make(OpCode::kWrite, local.data(), shared, 4096, mapped_key, 9));
  Slice* nowhere =
      batch.Add(Make(OpCode::kWrite, local.data(), unregistered.data(), 4096, cma_key));
  Slice* bad_key = batch.Add(Make(OpCode::kWrite, local.data(), heap, 4096, kBadKey));
  Slice* leaves_buffer =
      batch.Add(Make(OpCode::kWrite, local.data(), shared + 62 * 1024, 4096, mapped_key));
  Slice* empty = batch.Add(Make(OpCode::kWrite, local.data(), nullptr, 0, cma_key));
  RunAll(batch);
  EXPECT_TRUE(initiator_ctx_.StatusOf(good).ok()) << initiator_ctx_.StatusOf(good);
  EXPECT_EQ(initiator_ctx_.StatusOf(stale).code(), StatusCode::kStale);
  EXPECT_EQ(initiator_ctx_.StatusOf(stale_mapped).code(), StatusCode::kStale);
  EXPECT_EQ(initiator_ctx_.StatusOf(nowhere).code(), StatusCode::kNotFound);
  EXPECT_EQ(initiator_ctx_.StatusOf(bad_key).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(initiator_ctx_.StatusOf(bad_key).message().find("bad shm key"), std::string::npos);
  EXPECT_EQ(initiator_ctx_.StatusOf(leaves_buffer).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(initiator_ctx_.StatusOf(empty).ok());
  EXPECT_EQ(initiator_->stats().mappings_dropped, 1u);
  EXPECT_EQ(0, std::memcmp(heap, local.data(), 4096));
  for (size_t i = 4096; i < 8192; ++i) ASSERT_EQ(heap[i], 0) << "a refused write landed";
  EXPECT_EQ(initiator_ctx_.duplicate_completions(), 0u);
}

TEST_F(ShmTransportTest, SubmitValidatesAndPushesBack) {
  // A peer whose grant socket accepts (through the backlog) but never answers: the one worker
  // stays on the first batch for io_timeout, so the queue fills.
  const std::string path = dir_->path() + "/silent.sock";
  const int listener = SilentListener(path);
  ASSERT_GE(listener, 0);
  ShmTransportOptions options = Options();
  options.workers = 1;
  options.max_queued_slices = 4;
  options.io_timeout = milliseconds(1500);
  initiator_ = std::make_unique<ShmTransport>(options);
  ASSERT_TRUE(initiator_->Start(&initiator_ctx_, {"i", ""}).ok());
  SegmentDesc desc;
  desc.name = "silent";
  desc.incarnation = kTargetIncarnation;
  desc.transports["shm"] = shm::EncodePeerAddress({::getpid(), path});
  std::shared_ptr<PeerLink> link = initiator_->Connect(desc).value_or(nullptr);
  ASSERT_NE(link, nullptr);

  std::vector<uint8_t> local(64);
  SliceBatch invalid(&initiator_ctx_);
  invalid.Add(Make(OpCode::kWrite, local.data(), local.data(), 8, kCmaKey))->op =
      static_cast<OpCode>(9);
  EXPECT_EQ(initiator_->Submit(*link, invalid.ptrs).code(), StatusCode::kInvalidArgument);
  Slice* const null_slice = nullptr;
  EXPECT_EQ(initiator_->Submit(*link, {&null_slice, 1}).code(), StatusCode::kInvalidArgument);
  SliceBatch too_many(&initiator_ctx_);
  for (int i = 0; i < 5; ++i)
    too_many.Add(Make(OpCode::kWrite, local.data(), local.data(), 8, kCmaKey));
  EXPECT_EQ(initiator_->Submit(*link, too_many.ptrs).code(), StatusCode::kInvalidArgument);
  PeerLink foreign;
  EXPECT_EQ(initiator_->Submit(foreign, too_many.ptrs).code(), StatusCode::kInvalidArgument);

  SliceBatch first(&initiator_ctx_), queued(&initiator_ctx_), extra(&initiator_ctx_);
  first.Add(Make(OpCode::kWrite, local.data(), local.data(), 8, kCmaKey));
  for (int i = 0; i < 4; ++i)
    queued.Add(Make(OpCode::kWrite, local.data(), local.data(), 8, kCmaKey));
  extra.Add(Make(OpCode::kWrite, local.data(), local.data(), 8, kCmaKey));
  ASSERT_TRUE(initiator_->Submit(*link, first.ptrs).ok());
  // The worker connects once it took `first` off the queue: then all four fit.
  ASSERT_TRUE(WaitConnectionPending(listener, milliseconds(1000)));
  const Status s = initiator_->Submit(*link, queued.ptrs);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(initiator_->Submit(*link, extra.ptrs).code(), StatusCode::kAgain);
  EXPECT_EQ(initiator_ctx_.completions(), 0u);  // Again queued nothing

  const auto start = std::chrono::steady_clock::now();
  initiator_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(3000));
  ASSERT_TRUE(initiator_ctx_.WaitAll(first.ptrs, kWait));
  ASSERT_TRUE(initiator_ctx_.WaitAll(queued.ptrs, kWait));
  EXPECT_EQ(initiator_ctx_.StatusOf(first.ptrs[0]).code(), StatusCode::kTimeout)
      << initiator_ctx_.StatusOf(first.ptrs[0]);
  for (Slice* q : queued.ptrs) EXPECT_EQ(initiator_ctx_.StatusOf(q).code(), StatusCode::kCanceled);
  EXPECT_EQ(initiator_ctx_.completions(), 5u);
  EXPECT_EQ(initiator_->Submit(*link, extra.ptrs).code(), StatusCode::kCanceled);
  ::close(listener);
}

// A target that never answers its grant channel (as a frozen process): slices complete Timeout
// at their deadline, well before io_timeout, whether a worker is waiting for their grant or
// they are still queued behind a stuck batch; a deadline already passed never asks at all.
TEST_F(ShmTransportTest, SlicesTimeOutAtTheirDeadlineWhenTheTargetDoesNotAnswer) {
  const std::string path = dir_->path() + "/silent.sock";
  const int listener = SilentListener(path);
  ASSERT_GE(listener, 0);
  ShmTransportOptions options = Options();
  options.workers = 1;
  options.io_timeout = milliseconds(5000);
  initiator_ = std::make_unique<ShmTransport>(options);
  ASSERT_TRUE(initiator_->Start(&initiator_ctx_, {"i", ""}).ok());
  SegmentDesc desc;
  desc.name = "frozen";
  desc.incarnation = kTargetIncarnation;
  desc.transports["shm"] = shm::EncodePeerAddress({::getpid(), path});
  std::shared_ptr<PeerLink> link = initiator_->Connect(desc).value_or(nullptr);
  ASSERT_NE(link, nullptr);
  std::vector<uint8_t> local(64), remote(64);

  SliceBatch past(&initiator_ctx_);
  past.Add(Make(OpCode::kWrite, local.data(), remote.data(), 8, kCmaKey))->deadline =
      std::chrono::steady_clock::now() - milliseconds(1);
  ASSERT_TRUE(initiator_->Submit(*link, past.ptrs).ok());
  ASSERT_TRUE(initiator_ctx_.WaitAll(past.ptrs, kWait));
  EXPECT_EQ(initiator_ctx_.StatusOf(past.ptrs[0]).code(), StatusCode::kTimeout);
  EXPECT_FALSE(WaitConnectionPending(listener, milliseconds(0))) << "a late slice asked anyway";

  SliceBatch stuck(&initiator_ctx_);  // in flight until Stop: outlives the loop
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "waiting for the grant" : "queued behind a stuck batch");
    SliceBatch batch(&initiator_ctx_);
    if (round == 1) {  // no deadline: the worker waits io_timeout on it
      stuck.Add(Make(OpCode::kWrite, local.data(), remote.data(), 8, kCmaKey));
      ASSERT_TRUE(initiator_->Submit(*link, stuck.ptrs).ok());
    }
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + milliseconds(300);
    for (int i = 0; i < 3; ++i) {
      batch.Add(Make(OpCode::kWrite, local.data(), remote.data() + i * 8, 8, kCmaKey))->deadline =
          deadline + milliseconds(i);
    }
    ASSERT_TRUE(initiator_->Submit(*link, batch.ptrs).ok());
    ASSERT_TRUE(initiator_ctx_.WaitAll(batch.ptrs, kWait));
    const auto late = std::chrono::steady_clock::now() - deadline;
    EXPECT_GE(late, milliseconds(0));
    EXPECT_LT(late, milliseconds(100)) << "completed long after the deadline";
    for (Slice* s : batch.ptrs) {
      EXPECT_EQ(initiator_ctx_.StatusOf(s).code(), StatusCode::kTimeout)
          << initiator_ctx_.StatusOf(s);
    }
    if (round == 1) EXPECT_EQ(initiator_ctx_.completions(), 7u) << "the stuck one still waits";
  }
  initiator_->Stop();
  EXPECT_EQ(initiator_->stats().timed_out_slices, initiator_->stats().failed_slices);
  EXPECT_EQ(initiator_ctx_.duplicate_completions(), 0u);
  ::close(listener);
}

// Every link made, used and dropped gives back what it held: its grant connections (and the
// target's end of them) and its mappings of the target's buffers.
TEST_F(ShmTransportTest, DroppedLinksReleaseTheirConnectionsAndMappings) {
  StartBoth();
  link_.reset();
  std::string cma_key, mapped_key;
  uint8_t* heap = TargetRegion(64 * 1024, false, &cma_key);
  uint8_t* shared = TargetRegion(64 * 1024, true, &mapped_key);
  std::vector<uint8_t> local(4096, 9);
  SegmentDesc desc;
  desc.name = "target";
  desc.incarnation = kTargetIncarnation;
  desc.transports["shm"] = published_;
  auto use_a_link = [&] {
    std::shared_ptr<PeerLink> link = initiator_->Connect(desc).value_or(nullptr);
    ASSERT_NE(link, nullptr);
    SliceBatch batch(&initiator_ctx_);
    batch.Add(Make(OpCode::kWrite, local.data(), heap, local.size(), cma_key));
    batch.Add(Make(OpCode::kWrite, local.data(), shared, local.size(), mapped_key));
    ASSERT_TRUE(initiator_->Submit(*link, batch.ptrs).ok());
    ASSERT_TRUE(initiator_ctx_.WaitAll(batch.ptrs, kWait));
    for (Slice* s : batch.ptrs) ASSERT_TRUE(initiator_ctx_.StatusOf(s).ok());
  };
  use_a_link();  // warms up what stays: the logger, lazily loaded libraries
  ASSERT_TRUE(WaitFor([&] { return initiator_->stats().mappings_alive == 0; }, kWait));
  ASSERT_TRUE(target_ctx_.WaitNoPins(kWait));
  const size_t fds = OpenFds();
  const size_t maps = FileMappings();
  for (int i = 0; i < 200; ++i) {
    use_a_link();
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(initiator_->stats().fd_fetches, 201u) << "one fetch per link: the cache is per link";
  EXPECT_TRUE(WaitFor([&] { return initiator_->stats().mappings_alive == 0; }, kWait));
  EXPECT_TRUE(WaitFor([&] { return OpenFds() <= fds; }, milliseconds(5000)))
      << OpenFds() << " fds open, " << fds << " before";
  EXPECT_TRUE(WaitFor([&] { return FileMappings() <= maps; }, milliseconds(5000)))
      << FileMappings() << " file mappings, " << maps << " before";
}

TEST_F(ShmTransportTest, IdleGrantConnectionsAreClosed) {
  ShmTransportOptions options = Options();
  options.idle_timeout = milliseconds(50);
  StartBoth(options);
  std::string key;
  uint8_t* remote = TargetRegion(4096, false, &key);
  std::vector<uint8_t> local(4096, 5);
  const size_t fds = OpenFds();
  SliceBatch batch(&initiator_ctx_);
  batch.Add(Make(OpCode::kWrite, local.data(), remote, local.size(), key));
  RunAll(batch);
  ASSERT_TRUE(initiator_ctx_.StatusOf(batch.ptrs[0]).ok());
  EXPECT_TRUE(WaitFor([&] { return initiator_->stats().idle_connections_closed == 1; }, kWait));
  EXPECT_TRUE(WaitFor([&] { return OpenFds() <= fds; }, kWait)) << "both ends closed";
  // The link still works: a new connection opens.
  SliceBatch again(&initiator_ctx_);
  again.Add(Make(OpCode::kWrite, local.data(), remote, local.size(), key));
  RunAll(again);
  EXPECT_TRUE(initiator_ctx_.StatusOf(again.ptrs[0]).ok());
}

TEST_F(ShmTransportTest, AStoppedTargetFailsSlicesAsUnavailable) {
  StartBoth();
  std::string key;
  uint8_t* remote = TargetRegion(4096, false, &key);
  std::vector<uint8_t> local(4096, 3);
  target_->Stop();
  SliceBatch batch(&initiator_ctx_);
  Slice* s = batch.Add(Make(OpCode::kWrite, local.data(), remote, 4096, key));
  RunAll(batch);
  EXPECT_EQ(initiator_ctx_.StatusOf(s).code(), StatusCode::kUnavailable)
      << initiator_ctx_.StatusOf(s);
  EXPECT_NE(initiator_ctx_.StatusOf(s).message().find("segment 'target'"), std::string::npos);
  EXPECT_EQ(remote[0], 0);
}

TEST(ShmCmaTest, AttributesABadAddressToItsCopyAndAVanishedPidToAll) {
  std::vector<uint8_t> src(3 * 4096), dst(3 * 4096, 0);
  shm_test::FillPattern(src.data(), src.size(), 5);
  const std::vector<shm::CmaCopy> copies = {
      {Addr(src.data()), Addr(dst.data()), 4096},
      {Addr(src.data() + 4096), 8, 4096},  // remote address 8 is never mapped
      {Addr(src.data() + 8192), Addr(dst.data() + 8192), 4096},
  };
  std::vector<Status> statuses = shm::CmaTransfer(::getpid(), OpCode::kWrite, copies);
  ASSERT_EQ(statuses.size(), 3u);
  EXPECT_TRUE(statuses[0].ok());
  EXPECT_EQ(statuses[1].code(), StatusCode::kInvalidArgument) << statuses[1];
  EXPECT_TRUE(statuses[2].ok());
  EXPECT_EQ(0, std::memcmp(dst.data(), src.data(), 4096));
  EXPECT_EQ(0, std::memcmp(dst.data() + 8192, src.data() + 8192, 4096));

  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // reaped: the pid names nothing now
  statuses = shm::CmaTransfer(child, OpCode::kRead, copies);
  for (const Status& s : statuses) {
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find("process_vm_readv from pid " + std::to_string(child)),
              std::string::npos)
        << s;
    EXPECT_NE(s.message().find("falls back to another transport"), std::string::npos);
  }
}

}  // namespace
}  // namespace ferry::shm_transport_test
