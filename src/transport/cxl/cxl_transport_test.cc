// CxlTransport with two instances in this process mapping one window file in /dev/shm (two
// mappings at different addresses): data movement through offsets, refusals, lifecycle, the
// queue and deadlines.
#include "transport/cxl/cxl_transport.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/cxl/cxl_test_support.h"
#include "transport/cxl/cxl_wire.h"

namespace ferry::cxl {
namespace {

using namespace std::chrono_literals;
using testing::Addr;
using testing::Fill;
using testing::kMiB;
using testing::SliceBatch;
using testing::TempWindowFile;
using testing::TestContext;

constexpr uint64_t kTargetIncarnation = 0x7a7a7a;
constexpr uint64_t kGeneration = 3;
constexpr uint64_t kWindow = 64 * kMiB;

CxlTransportOptions Options(const std::string& path, uint64_t size = kWindow) {
  CxlTransportOptions o;
  o.window_path = path;
  o.window_size = size;
  o.io_timeout = 2000ms;
  return o;
}

class CxlTransportTest : public ::testing::Test {
 protected:
  CxlTransportTest() : target_ctx_(kTargetIncarnation), initiator_ctx_(0x1111) {}
  ~CxlTransportTest() override {
    if (initiator_) initiator_->Stop();
    if (target_) target_->Stop();
  }

  void SetUp() override {
    target_ = std::make_unique<CxlTransport>(Options(file_.path()));
    Result<std::string> published = target_->Start(&target_ctx_, {"target", "127.0.0.1"});
    ASSERT_TRUE(published.ok()) << published.status();
    published_ = *published;
    initiator_ = std::make_unique<CxlTransport>(Options(file_.path()));
    ASSERT_TRUE(initiator_->Start(&initiator_ctx_, {"initiator", "127.0.0.1"}).ok());
    ASSERT_NE(target_->window_base(), initiator_->window_base()) << "two mappings, two bases";
    remote_ = Allocate(*target_, 8 * kMiB);
    local_ = Allocate(*initiator_, 8 * kMiB);
    ASSERT_TRUE(remote_ && local_);
    std::memset(remote_, 0xAA, 8 * kMiB);
    Result<std::string> key =
        target_->RegisterMemory(Addr(remote_), 8 * kMiB, Location::Cpu(), MemoryAccess::kRemote);
    ASSERT_TRUE(key.ok()) << key.status();
    key_ = *key;
    target_ctx_.AddRegion(remote_, 8 * kMiB, kGeneration, true, "cxl");
  }

  // The target's published endpoint with its grant socket moved to `grant_path` (where a test
  // puts a socket that never answers); empty when the endpoint does not decode.
  std::string EndpointWithGrantAt(const std::string& grant_path) const {
    Result<Endpoint> endpoint = DecodeEndpoint(published_);
    if (!endpoint.ok()) return "";
    endpoint->grant_path = grant_path;
    return EncodeEndpoint(*endpoint);
  }

  static uint8_t* Allocate(CxlTransport& t, size_t n) {
    Result<void*> p = t.AllocateShared(n, Location::Cpu());
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? static_cast<uint8_t*>(*p) : nullptr;
  }
  SegmentDesc TargetDesc(const std::string& published) const {
    SegmentDesc desc;
    desc.name = "target";
    desc.incarnation = kTargetIncarnation;
    desc.transports["cxl"] = published;
    return desc;
  }
  std::shared_ptr<PeerLink> Connect() {
    Result<std::shared_ptr<PeerLink>> link = initiator_->Connect(TargetDesc(published_));
    EXPECT_TRUE(link.ok()) << link.status();
    return link.ok() ? *link : nullptr;
  }
  Slice Make(OpCode op, const void* local, uint64_t remote_offset, uint64_t length) const {
    Slice s;
    s.op = op;
    s.local_addr = Addr(local);
    s.remote_addr = Addr(remote_) + remote_offset;
    s.length = length;
    s.remote_generation = kGeneration;
    s.peer_incarnation = kTargetIncarnation;
    s.remote_key = key_;
    return s;
  }
  void Run(PeerLink& link, const SliceBatch& batch) {
    ASSERT_TRUE(initiator_->Submit(link, batch.ptrs).ok());
    ASSERT_TRUE(initiator_ctx_.WaitAll(batch.ptrs, 20s));
  }
  StatusCode CodeOf(Slice* s) { return initiator_ctx_.StatusOf(s).code(); }

  TempWindowFile file_;
  TestContext target_ctx_;
  TestContext initiator_ctx_;
  std::unique_ptr<CxlTransport> target_;
  std::unique_ptr<CxlTransport> initiator_;
  std::string published_;
  std::string key_;
  uint8_t* remote_ = nullptr;
  uint8_t* local_ = nullptr;
};

TEST(CxlTransportLifecycleTest, DescribesItselfAndKeepsLifecycleRules) {
  TempWindowFile file;
  TestContext ctx(1);
  CxlTransport cxl(Options(file.path()));
  EXPECT_EQ(cxl.name(), "cxl");
  EXPECT_FALSE(cxl.capabilities().reaches_other_hosts);
  EXPECT_FALSE(cxl.capabilities().reaches_device_memory);
  EXPECT_TRUE(cxl.capabilities().allocates_shared_memory);
  EXPECT_EQ(cxl.window_base(), nullptr);
  EXPECT_EQ(cxl.window_size(), 0u);
  EXPECT_EQ(cxl.RegisterMemory(1, 64, Location::Cpu(), MemoryAccess::kRemote).status().code(),
            StatusCode::kBusy);
  EXPECT_EQ(cxl.AllocateShared(64, Location::Cpu()).status().code(), StatusCode::kBusy);
  EXPECT_EQ(cxl.Connect(SegmentDesc{}).status().code(), StatusCode::kBusy);
  EXPECT_EQ(cxl.OnExchange("x").status().code(), StatusCode::kInvalidArgument);

  ASSERT_TRUE(cxl.Start(&ctx, {"a", "127.0.0.1"}).ok());
  EXPECT_NE(cxl.window_base(), nullptr);
  EXPECT_EQ(cxl.window_size(), kWindow);
  EXPECT_EQ(cxl.Start(&ctx, {"a", "127.0.0.1"}).status().code(), StatusCode::kBusy);
  cxl.Stop();
  cxl.Stop();
  EXPECT_EQ(cxl.Start(&ctx, {"a", "127.0.0.1"}).status().code(), StatusCode::kBusy);
  EXPECT_NE(cxl.window_base(), nullptr) << "the mapping stays until destruction";

  std::unique_ptr<Transport> unnamed = CreateCxlTransport(CxlTransportOptions{});
  Result<std::string> refused = unnamed->Start(&ctx, {"a", "127.0.0.1"});
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("window_path"), std::string::npos) << refused.status();
  CxlTransportOptions no_workers = Options(file.path());
  no_workers.workers = 0;
  EXPECT_EQ(CxlTransport(no_workers).Start(&ctx, {"a", ""}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      CxlTransport(Options("/dev/shm/ferry-cxl-absent")).Start(&ctx, {"a", ""}).status().code(),
      StatusCode::kNotFound);
}

TEST_F(CxlTransportTest, WritesAndReadsThroughWindowOffsets) {
  Result<RegionKey> key = DecodeKey(key_);
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(key->offset, Addr(remote_) - Addr(target_->window_base()));
  EXPECT_EQ(key->length, 8 * kMiB);
  std::shared_ptr<PeerLink> link = Connect();
  ASSERT_TRUE(link);
  const std::pair<size_t, size_t> cases[] = {{1, 1}, {4095, 4099}, {kMiB + 3, 2 * kMiB + 7}};
  uint32_t seed = 0;
  for (const auto& [length, offset] : cases) {
    Fill(local_, length, ++seed);
    SliceBatch write(&initiator_ctx_);
    write.Add(Make(OpCode::kWrite, local_, offset, length));
    Run(*link, write);
    ASSERT_TRUE(initiator_ctx_.StatusOf(write.ptrs[0]).ok())
        << initiator_ctx_.StatusOf(write.ptrs[0]);
    ASSERT_EQ(0, std::memcmp(remote_ + offset, local_, length));
    EXPECT_EQ(0xAA, remote_[offset - 1]);
    EXPECT_EQ(0xAA, remote_[offset + length]);
    uint8_t* back = local_ + 4 * kMiB;
    std::memset(back, 0, length);
    SliceBatch read(&initiator_ctx_);
    read.Add(Make(OpCode::kRead, back, offset, length));
    Run(*link, read);
    ASSERT_TRUE(initiator_ctx_.StatusOf(read.ptrs[0]).ok());
    ASSERT_EQ(0, std::memcmp(back, local_, length));
  }
  EXPECT_TRUE(target_ctx_.WaitNoPins(5s));
  // The first access was pinned on the target and leased its region; the other five pinned
  // through the target's lease table, each checked against it.
  EXPECT_EQ(target_ctx_.pin_calls(), 1u);
  EXPECT_EQ(target_ctx_.active_leases(), 1);
}

TEST_F(CxlTransportTest, MemoryOutsideTheWindowIsNotFound) {
  std::vector<uint8_t> heap(4096);
  EXPECT_EQ(
      target_
          ->RegisterMemory(Addr(heap.data()), heap.size(), Location::Cpu(), MemoryAccess::kRemote)
          .status()
          .code(),
      StatusCode::kNotFound);
  const uint64_t last = Addr(target_->window_base()) + kWindow - 100;
  EXPECT_EQ(
      target_->RegisterMemory(last, 200, Location::Cpu(), MemoryAccess::kRemote).status().code(),
      StatusCode::kNotFound)
      << "a region leaving the window";
  EXPECT_EQ(target_->RegisterMemory(Addr(remote_), 64, Location::Cuda(0), MemoryAccess::kRemote)
                .status()
                .code(),
            StatusCode::kNotFound);
  EXPECT_EQ(target_->RegisterMemory(Addr(remote_), 0, Location::Cpu(), MemoryAccess::kRemote)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(target_->RegisterMemory(last, 100, Location::Cpu(), MemoryAccess::kRemote).ok());
  EXPECT_TRUE(target_->UnregisterMemory(last, 100).ok());
}

TEST_F(CxlTransportTest, ConnectRefusesAnotherWindowAndBadEndpoints) {
  TempWindowFile other_file;
  TestContext other_ctx(0x2222);
  for (uint64_t size : {kWindow, kWindow / 2}) {
    const std::string path = size == kWindow ? other_file.path() : file_.path();
    CxlTransport other(Options(path, size));
    Result<std::string> published = other.Start(&other_ctx, {"other", ""});
    ASSERT_TRUE(published.ok()) << published.status();
    Result<std::shared_ptr<PeerLink>> link = initiator_->Connect(TargetDesc(*published));
    EXPECT_EQ(link.status().code(), StatusCode::kUnavailable) << size;
    EXPECT_NE(link.status().message().find("another cxl window"), std::string::npos)
        << link.status();
  }
  SegmentDesc desc = TargetDesc(published_);
  desc.transports.clear();
  EXPECT_EQ(initiator_->Connect(desc).status().code(), StatusCode::kInvalidArgument);
  desc.transports["cxl"] = "127.0.0.1:80";
  Result<std::shared_ptr<PeerLink>> garbage = initiator_->Connect(desc);
  EXPECT_EQ(garbage.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(garbage.status().message().find("target"), std::string::npos) << garbage.status();
}

TEST_F(CxlTransportTest, AllocationsOfTwoTransportsAreDisjointAndFreedOnce) {
  uint8_t* a = Allocate(*target_, 1000);
  uint8_t* b = Allocate(*initiator_, 1000);
  ASSERT_TRUE(a && b);
  const uint64_t oa = Addr(a) - Addr(target_->window_base());
  const uint64_t ob = Addr(b) - Addr(initiator_->window_base());
  EXPECT_TRUE(oa + 1000 <= ob || ob + 1000 <= oa) << oa << " " << ob;
  EXPECT_EQ(target_->AllocateShared(64, Location::Cuda(0)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(target_->FreeShared(b).code(), StatusCode::kNotFound) << "the other's allocation";
  EXPECT_TRUE(target_->FreeShared(a).ok());
  EXPECT_EQ(target_->FreeShared(a).code(), StatusCode::kNotFound);
}

TEST_F(CxlTransportTest, LocalMemoryOutsideTheWindowFailsTheSlice) {
  std::shared_ptr<PeerLink> link = Connect();
  ASSERT_TRUE(link);
  std::vector<uint8_t> heap(4096, 0x33);
  SliceBatch batch(&initiator_ctx_);
  Slice* write = batch.Add(Make(OpCode::kWrite, heap.data(), 0, heap.size()));
  Slice* read = batch.Add(Make(OpCode::kRead, heap.data(), 0, heap.size()));
  Run(*link, batch);
  EXPECT_EQ(CodeOf(write), StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(read), StatusCode::kInvalidArgument);
  EXPECT_EQ(0xAA, remote_[0]);
  EXPECT_EQ(0x33, heap[0]);
}

TEST_F(CxlTransportTest, OutOfRangeIsRejectedWithNothingWritten) {
  // The target's registry knows only the first 1 MiB, while the key covers 8 MiB: the
  // initiator's own check catches what leaves the key, the target's pin the rest.
  std::vector<uint8_t> snapshot(remote_, remote_ + 8 * kMiB);
  std::shared_ptr<PeerLink> link = Connect();
  ASSERT_TRUE(link);
  Fill(local_, 64 * 1024, 4);
  target_ctx_.CloseRegion(remote_);  // the 8 MiB region is gone; a 1 MiB one replaces it
  target_ctx_.AddRegion(remote_ + 4096, kMiB, kGeneration + 1, true, "cxl");
  SliceBatch batch(&initiator_ctx_);
  Slice* past_key = batch.Add(Make(OpCode::kWrite, local_, 8 * kMiB - 10, 20));
  Slice before_key = Make(OpCode::kWrite, local_, 0, 64);
  before_key.remote_addr -= 64;
  Slice* before = batch.Add(before_key);
  Slice past_region = Make(OpCode::kWrite, local_, kMiB, 8192);
  past_region.remote_generation = kGeneration + 1;
  Slice* leaves_region = batch.Add(past_region);
  Slice* wrong_key = batch.Add(Make(OpCode::kWrite, local_, 4096, 64));
  wrong_key->remote_key = "not a key";
  const uint64_t pins_before = target_ctx_.pin_calls();
  Run(*link, batch);
  EXPECT_EQ(CodeOf(past_key), StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(before), StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(wrong_key), StatusCode::kInvalidArgument);
  EXPECT_EQ(CodeOf(leaves_region), StatusCode::kInvalidArgument) << "refused by the target";
  EXPECT_EQ(target_ctx_.pin_calls(), pins_before + 1) << "only the in-key slice reached it";
  EXPECT_EQ(0, std::memcmp(snapshot.data(), remote_, 8 * kMiB)) << "a refused write landed";
}

TEST_F(CxlTransportTest, ClosingRegionOrOldPlanIsStale) {
  std::shared_ptr<PeerLink> link = Connect();
  ASSERT_TRUE(link);
  Fill(local_, 4096, 8);
  SliceBatch batch(&initiator_ctx_);
  Slice old_generation = Make(OpCode::kWrite, local_, 0, 4096);
  old_generation.remote_generation = kGeneration - 1;
  Slice* generation = batch.Add(old_generation);
  Slice old_incarnation = Make(OpCode::kWrite, local_, 0, 4096);
  old_incarnation.peer_incarnation = kTargetIncarnation + 1;
  Slice* incarnation = batch.Add(old_incarnation);
  Slice* fine = batch.Add(Make(OpCode::kRead, local_ + 8192, 0, 4096));
  Run(*link, batch);
  EXPECT_EQ(CodeOf(generation), StatusCode::kStale);
  EXPECT_EQ(CodeOf(incarnation), StatusCode::kStale);
  EXPECT_TRUE(initiator_ctx_.StatusOf(fine).ok()) << "one refusal fails only its slice";

  ASSERT_TRUE(target_ctx_.CloseRegion(remote_));
  SliceBatch closing(&initiator_ctx_);
  Slice* s = closing.Add(Make(OpCode::kWrite, local_, 0, 4096));
  Run(*link, closing);
  EXPECT_EQ(CodeOf(s), StatusCode::kStale);
  EXPECT_EQ(0xAA, remote_[0]);
  EXPECT_TRUE(target_ctx_.WaitNoPins(5s));
}

TEST_F(CxlTransportTest, BatchLargerThanOneAcquireMovesEverySlice) {
  std::shared_ptr<PeerLink> link = Connect();
  ASSERT_TRUE(link);
  constexpr size_t kSlices = 5000;  // more than one Acquire carries
  constexpr size_t kEach = 1000;
  Fill(local_, kSlices * kEach, 21);
  SliceBatch batch(&initiator_ctx_);
  for (size_t i = 0; i < kSlices; ++i) {
    batch.Add(Make(OpCode::kWrite, local_ + i * kEach, i * kEach, kEach));
  }
  Run(*link, batch);
  for (Slice* s : batch.ptrs) ASSERT_TRUE(initiator_ctx_.StatusOf(s).ok());
  EXPECT_EQ(0, std::memcmp(remote_, local_, kSlices * kEach));
  EXPECT_EQ(0u, initiator_ctx_.duplicate_completions());
}

TEST_F(CxlTransportTest, SubmitValidatesItsArguments) {
  std::shared_ptr<PeerLink> link = Connect();
  ASSERT_TRUE(link);
  SliceBatch batch(&initiator_ctx_);
  batch.Add(Make(OpCode::kWrite, local_, 0, 64));
  Slice bad_op = Make(OpCode::kWrite, local_, 0, 64);
  bad_op.op = static_cast<OpCode>(9);
  batch.Add(bad_op);
  EXPECT_EQ(initiator_->Submit(*link, batch.ptrs).code(), StatusCode::kInvalidArgument);
  std::vector<Slice*> with_null = {batch.ptrs[0], nullptr};
  EXPECT_EQ(initiator_->Submit(*link, with_null).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(initiator_ctx_.completions(), 0u) << "nothing was queued";
  Result<std::shared_ptr<PeerLink>> foreign =
      target_->Connect(TargetDesc(published_));  // a link of the other transport
  ASSERT_TRUE(foreign.ok());
  EXPECT_EQ(initiator_->Submit(**foreign, {batch.ptrs.data(), 1}).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(initiator_->Submit(*link, {}).ok());
}

// A grant socket that accepts connections (the backlog does) and never answers.
class SilentGrantSocket {
 public:
  explicit SilentGrantSocket(std::string path) : path_(std::move(path)) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
    listening_ = bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&  // NOLINT
                 listen(fd_, 16) == 0;
  }
  ~SilentGrantSocket() {
    close(fd_);
    unlink(path_.c_str());
  }
  // True once an initiator's connection waits in the backlog, by `timeout`.
  bool WaitConnectionPending(std::chrono::milliseconds timeout) const {
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, static_cast<int>(timeout.count())) == 1;
  }
  SilentGrantSocket(const SilentGrantSocket&) = delete;
  SilentGrantSocket& operator=(const SilentGrantSocket&) = delete;
  bool listening() const { return listening_; }

 private:
  std::string path_;
  int fd_ = -1;
  bool listening_ = false;
};

TEST_F(CxlTransportTest, FullQueueIsAgainAndStopCancelsWhatIsQueued) {
  // One worker, stuck in an Acquire to a target that never answers (until io_timeout).
  CxlTransportOptions o = Options(file_.path());
  o.workers = 1;
  o.max_queued_slices = 2;
  o.io_timeout = 3s;
  TestContext ctx(0x3333);
  CxlTransport initiator(o);
  ASSERT_TRUE(initiator.Start(&ctx, {"slow", ""}).ok());
  const std::string silent_path = file_.path() + ".silent";
  SilentGrantSocket silent(silent_path);
  ASSERT_TRUE(silent.listening());
  const std::string endpoint = EndpointWithGrantAt(silent_path);
  ASSERT_FALSE(endpoint.empty());
  Result<std::shared_ptr<PeerLink>> link = initiator.Connect(TargetDesc(endpoint));
  ASSERT_TRUE(link.ok()) << link.status();
  uint8_t* local = Allocate(initiator, 4096);
  ASSERT_NE(local, nullptr);

  SliceBatch stuck(&ctx);
  stuck.Add(Make(OpCode::kWrite, local, 0, 64));
  SliceBatch queued(&ctx);
  queued.Add(Make(OpCode::kWrite, local, 64, 64));
  queued.Add(Make(OpCode::kWrite, local, 128, 64));
  SliceBatch extra(&ctx);
  extra.Add(Make(OpCode::kWrite, local, 192, 64));
  SliceBatch too_many(&ctx);
  for (int i = 0; i < 3; ++i) too_many.Add(Make(OpCode::kWrite, local, 0, 64));
  EXPECT_EQ(initiator.Submit(**link, too_many.ptrs).code(), StatusCode::kInvalidArgument);

  ASSERT_TRUE(initiator.Submit(**link, stuck.ptrs).ok());
  // The worker connects once it took `stuck`: then the queue holds exactly `queued`.
  ASSERT_TRUE(silent.WaitConnectionPending(1s));
  const Status s = initiator.Submit(**link, queued.ptrs);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(initiator.Submit(**link, extra.ptrs).code(), StatusCode::kAgain);

  initiator.Stop();  // waits out the stuck Acquire (io_timeout), cancels the queue
  ASSERT_TRUE(ctx.WaitAll(queued.ptrs, 1s)) << "Stop completed the queued slices";
  for (Slice* q : queued.ptrs) EXPECT_EQ(ctx.StatusOf(q).code(), StatusCode::kCanceled);
  ASSERT_TRUE(ctx.WaitAll(stuck.ptrs, 1s));
  EXPECT_FALSE(ctx.StatusOf(stuck.ptrs[0]).ok());
  EXPECT_EQ(initiator.Submit(**link, extra.ptrs).code(), StatusCode::kCanceled);
  EXPECT_EQ(0u, ctx.duplicate_completions());
  EXPECT_EQ(0xAA, remote_[0]);
}

// A target whose grant channel never answers (as a frozen process): slices complete Timeout at
// their deadline, not at io_timeout, and nothing is written.
TEST_F(CxlTransportTest, ASilentTargetTimesSlicesOutAtTheirDeadline) {
  CxlTransportOptions o = Options(file_.path());
  o.io_timeout = 5s;
  TestContext ctx(0x4444);
  CxlTransport initiator(o);
  ASSERT_TRUE(initiator.Start(&ctx, {"i", ""}).ok());
  const std::string silent_path = file_.path() + ".silent";
  SilentGrantSocket silent(silent_path);
  ASSERT_TRUE(silent.listening());
  const std::string endpoint = EndpointWithGrantAt(silent_path);
  ASSERT_FALSE(endpoint.empty());
  Result<std::shared_ptr<PeerLink>> link = initiator.Connect(TargetDesc(endpoint));
  ASSERT_TRUE(link.ok()) << link.status();
  uint8_t* local = Allocate(initiator, 4096);
  ASSERT_NE(local, nullptr);
  std::memset(local, 0x11, 4096);
  SliceBatch batch(&ctx);
  const auto deadline = std::chrono::steady_clock::now() + 300ms;
  for (int i = 0; i < 4; ++i) {
    batch.Add(Make(OpCode::kWrite, local + i * 64, i * 64, 64))->deadline = deadline;
  }
  ASSERT_TRUE(initiator.Submit(**link, batch.ptrs).ok());
  ASSERT_TRUE(ctx.WaitAll(batch.ptrs, 10s));
  const auto late = std::chrono::steady_clock::now() - deadline;
  EXPECT_GE(late, 0ms);
  EXPECT_LT(late, 100ms);
  for (Slice* s : batch.ptrs)
    EXPECT_EQ(ctx.StatusOf(s).code(), StatusCode::kTimeout) << ctx.StatusOf(s);
  EXPECT_EQ(0xAA, remote_[0]);
  initiator.Stop();
}

}  // namespace
}  // namespace ferry::cxl
