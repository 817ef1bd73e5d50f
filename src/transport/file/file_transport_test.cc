// The file transport through the Transport seam, with a TestContext standing in for the engine
// (the engine-level behaviour is in src/engine/file_buffer_test.cc): the contract points the
// conformance suite checks for memory transports, on a file buffer. Every slice completes
// exactly once (also at Stop), a slice whose deadline passed while it waited moves nothing, a
// slice planned against another generation or a closing buffer is Stale, and a short file
// window is never reported done short.
#include "transport/file/file_transport.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "transport/conformance/test_context.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
using transport_testing::SliceBatch;
using transport_testing::TestContext;

constexpr uint64_t kFileAddr = uint64_t{0xf} << 60;  // as the engine assigns them
constexpr uint64_t kSize = 4 << 20;

class FileTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Where io_uring is refused (a container's seccomp filter, kernel.io_uring_disabled) the
    // transport cannot exist: nothing here to test.
    if (Status uring = FileTransportAvailable(); !uring.ok()) {
      GTEST_SKIP() << "io_uring unavailable here, file transport not tested: " << uring;
    }
    std::string templ = std::filesystem::temp_directory_path().string() + "/ferry-ft-XXXXXX";
    const int fd = ::mkstemp(templ.data());
    ASSERT_GE(fd, 0);
    path_ = templ;
    std::vector<uint8_t> bytes(kSize, 0x11);
    ASSERT_EQ(::pwrite(fd, bytes.data(), kSize, 0), static_cast<ssize_t>(kSize));
    ::close(fd);
    FileTransportOptions options;
    options.queue_depth = 1;  // one I/O at a time: the rest waits, to expire or be canceled
    Result<std::unique_ptr<Transport>> made = CreateFileTransport(options);
    ASSERT_TRUE(made.ok()) << made.status();
    transport_ = std::move(made).value();
    ASSERT_TRUE(transport_->Start(&ctx_, {"self", "127.0.0.1"}).ok());
    Result<FileWindow> window = transport_->RegisterFile(kFileAddr, kSize, path_, 0);
    ASSERT_TRUE(window.ok()) << window.status();
    EXPECT_EQ(window->size, kSize);
    ctx_.AddRegion(reinterpret_cast<const void*>(kFileAddr), kSize, 3, true, "file");
    SegmentDesc self;
    self.name = "self";
    self.incarnation = ctx_.incarnation();
    Result<std::shared_ptr<PeerLink>> link = transport_->Connect(self);
    ASSERT_TRUE(link.ok());
    link_ = *link;
    memory_.assign(kSize, 0x22);
  }
  void TearDown() override {
    if (transport_ != nullptr) transport_->Stop();
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove(path_, ec);
  }

  Slice Make(OpCode op, uint64_t offset, uint64_t length, uint64_t generation = 3) {
    Slice s;
    s.op = op;
    s.local_addr = reinterpret_cast<uint64_t>(memory_.data()) + offset;
    s.remote_addr = kFileAddr + offset;
    s.length = length;
    s.remote_generation = generation;
    s.peer_incarnation = ctx_.incarnation();
    return s;
  }

  std::vector<uint8_t> FileBytes() {
    std::vector<uint8_t> out(kSize);
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_EQ(::pread(fd, out.data(), kSize, 0), static_cast<ssize_t>(kSize));
    ::close(fd);
    return out;
  }

  TestContext ctx_{0x5e1f};
  std::string path_;
  std::unique_ptr<Transport> transport_;
  std::shared_ptr<PeerLink> link_;
  std::vector<uint8_t> memory_;
};

TEST_F(FileTransportTest, StaleGenerationAndClosingBufferAreRefusedBeforeAnyByte) {
  SliceBatch batch(&ctx_);
  batch.Add(Make(OpCode::kWrite, 0, 4096, /*generation=*/2));
  ASSERT_TRUE(transport_->Submit(*link_, batch.ptrs).ok());
  ASSERT_TRUE(ctx_.WaitAll(batch.ptrs, 10s));
  EXPECT_EQ(ctx_.StatusOf(batch.ptrs[0]).code(), StatusCode::kStale);
  ASSERT_TRUE(ctx_.CloseRegion(reinterpret_cast<const void*>(kFileAddr)));
  SliceBatch closing(&ctx_);
  closing.Add(Make(OpCode::kWrite, 0, 4096));
  ASSERT_TRUE(transport_->Submit(*link_, closing.ptrs).ok());
  ASSERT_TRUE(ctx_.WaitAll(closing.ptrs, 10s));
  EXPECT_EQ(ctx_.StatusOf(closing.ptrs[0]).code(), StatusCode::kStale);
  EXPECT_EQ(FileBytes(), std::vector<uint8_t>(kSize, 0x11));
  EXPECT_TRUE(ctx_.WaitNoPins(10s));
}

TEST_F(FileTransportTest, ExpiredWaitingSlicesMoveNothingAndStopCompletesEachOnce) {
  // Queue depth 1: the first slice goes to the kernel, the rest wait behind it. Slices whose
  // deadline already passed complete with Timeout and never touch the file.
  SliceBatch expired(&ctx_);
  expired.Add(Make(OpCode::kWrite, 0, 1 << 20));
  for (uint64_t i = 1; i < 4; ++i) {
    Slice s = Make(OpCode::kWrite, i << 20, 1 << 20);
    s.deadline = std::chrono::steady_clock::now() - 1ms;
    expired.Add(s);
  }
  ASSERT_TRUE(transport_->Submit(*link_, expired.ptrs).ok());
  ASSERT_TRUE(ctx_.WaitAll(expired.ptrs, 10s));
  EXPECT_TRUE(ctx_.StatusOf(expired.ptrs[0]).ok());
  for (size_t i = 1; i < expired.ptrs.size(); ++i) {
    EXPECT_EQ(ctx_.StatusOf(expired.ptrs[i]).code(), StatusCode::kTimeout);
  }
  std::vector<uint8_t> file = FileBytes();
  EXPECT_EQ(file[0], 0x22);
  EXPECT_EQ(file[(1 << 20) + 5], 0x11);
  EXPECT_EQ(file[kSize - 1], 0x11);

  // Many slices in, then Stop: each completes exactly once (done or Canceled), none is lost.
  SliceBatch many(&ctx_);
  for (uint64_t i = 0; i < 256; ++i) many.Add(Make(OpCode::kRead, (i % 64) * 65536, 65536));
  ASSERT_TRUE(transport_->Submit(*link_, many.ptrs).ok());
  transport_->Stop();
  ASSERT_TRUE(ctx_.WaitAll(many.ptrs, 10s));
  for (Slice* s : many.ptrs) {
    const Status st = ctx_.StatusOf(s);
    EXPECT_TRUE(st.ok() || st.code() == StatusCode::kCanceled) << st;
  }
  EXPECT_EQ(ctx_.duplicate_completions(), 0u);
  EXPECT_TRUE(ctx_.WaitNoPins(10s));
  // After Stop nothing is accepted.
  SliceBatch late(&ctx_);
  late.Add(Make(OpCode::kRead, 0, 4096));
  EXPECT_FALSE(transport_->Submit(*link_, late.ptrs).ok());
}

TEST_F(FileTransportTest, RegisterRefusesAWindowPastTheEndAndMemory) {
  EXPECT_EQ(transport_->RegisterFile(kFileAddr + (8 << 20), kSize, path_, 1).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(
      transport_->RegisterFile(kFileAddr + (8 << 20), 1, path_ + ".missing", 0).status().code(),
      StatusCode::kNotFound);
  EXPECT_EQ(transport_
                ->RegisterMemory(reinterpret_cast<uint64_t>(memory_.data()), 16, Location::Cpu(),
                                 MemoryAccess::kRemote)
                .status()
                .code(),
            StatusCode::kNotFound);
  EXPECT_TRUE(transport_->UnregisterFile(kFileAddr).ok());
  EXPECT_EQ(transport_->UnregisterFile(kFileAddr).code(), StatusCode::kNotFound);
}

// io_uring instances open in this process (their fds read "anon_inode:[io_uring]").
int OpenRings() {
  int rings = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(entry.path(), ec).string() == "anon_inode:[io_uring]") {
      ++rings;
    }
  }
  return rings;
}

// Every engine installs the transport ("auto"): a ring and its thread only come with the first
// file, and go with the transport.
TEST(FileTransportLazyTest, NoRingBeforeTheFirstFile) {
  if (Status uring = FileTransportAvailable(); !uring.ok()) {
    GTEST_SKIP() << "io_uring unavailable here, file transport not tested: " << uring;
  }
  std::string path = std::filesystem::temp_directory_path().string() + "/ferry-ft-XXXXXX";
  const int fd = ::mkstemp(path.data());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 1 << 20), 0);
  ::close(fd);
  const int before = OpenRings();
  {
    TestContext ctx(0x1a2e);
    Result<std::unique_ptr<Transport>> made = CreateFileTransport();
    ASSERT_TRUE(made.ok()) << made.status();
    ASSERT_TRUE((*made)->Start(&ctx, {"self", "127.0.0.1"}).ok());
    EXPECT_EQ(OpenRings(), before);
    EXPECT_TRUE((*made)->RegisterFile(kFileAddr, 1 << 20, path, 0).ok());
    EXPECT_EQ(OpenRings(), before + 1);
    (*made)->Stop();
  }
  EXPECT_EQ(OpenRings(), before);
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace ferry
