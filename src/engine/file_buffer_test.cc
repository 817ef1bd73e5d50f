// File buffers through the facade (registerLocalFile, the "file" transport on io_uring), with
// real files in a temporary directory on disk and in /dev/shm, and a size-limited tmpfs for the
// full file system. Every byte is checked in the file itself (pread), including the bytes just
// outside the published window.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/wait_for.h"
#include "ferry/transfer_engine.h"
#include "transport/file/file_transport.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * 1024;

uint8_t Pattern(uint64_t i, uint32_t seed) {
  return static_cast<uint8_t>(seed * 131 + i * 31 + (i >> 11));
}

// A directory under `base`, removed with everything in it.
struct TempDir {
  explicit TempDir(const std::string& base) {
    std::string templ = base + "/ferry-file-test-XXXXXX";
    if (::mkdtemp(templ.data()) != nullptr) path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
  std::string path;
};

// Writes a file of `size` bytes of Pattern(seed).
void MakeFile(const std::string& path, uint64_t size, uint32_t seed) {
  std::vector<uint8_t> bytes(size);
  for (uint64_t i = 0; i < size; ++i) bytes[i] = Pattern(i, seed);
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  ASSERT_EQ(::pwrite(fd, bytes.data(), size, 0), static_cast<ssize_t>(size));
  ::close(fd);
}

std::vector<uint8_t> ReadFile(const std::string& path, uint64_t offset, uint64_t length) {
  std::vector<uint8_t> out(length);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  if (fd < 0) return {};
  EXPECT_EQ(::pread(fd, out.data(), length, static_cast<off_t>(offset)),
            static_cast<ssize_t>(length));
  ::close(fd);
  return out;
}

// Page-aligned memory, so O_DIRECT can apply.
struct Memory {
  explicit Memory(size_t n) : size(n) {
    data = static_cast<uint8_t*>(std::aligned_alloc(4096, n));
    std::memset(data, 0, n);
  }
  ~Memory() { std::free(data); }
  uint8_t* data;
  size_t size;
};

// Where io_uring is refused (a container's seccomp filter, kernel.io_uring_disabled) there is no
// file transport: each test skips, saying why.
#define SKIP_WITHOUT_IO_URING()                                                        \
  do {                                                                                 \
    if (Status uring = FileTransportAvailable(); !uring.ok()) {                        \
      GTEST_SKIP() << "io_uring unavailable here, file buffers not tested: " << uring; \
    }                                                                                  \
  } while (false)

EngineOptions FileEngineOptions() {
  EngineOptions options;
  options.metadata_conn = "P2PHANDSHAKE";
  options.host = "127.0.0.1";
  options.transports = {"tcp", "file"};
  options.task_timeout = 20s;
  return options;
}

std::vector<TransferStatus> RunBatch(TransferEngine& engine,
                                     const std::vector<TransferRequest>& rs) {
  Result<BatchId> batch = engine.allocateBatchID(rs.size());
  EXPECT_TRUE(batch.ok()) << batch.status();
  if (!batch.ok()) return {};
  Status submitted = engine.submitTransfer(*batch, rs);
  EXPECT_TRUE(submitted.ok()) << submitted;
  std::vector<TransferStatus> out;
  if (submitted.ok()) {
    Result<BatchStatus> done = engine.waitBatch(*batch, 30s);
    EXPECT_TRUE(done.ok()) << done.status();
    for (size_t i = 0; i < rs.size(); ++i) {
      Result<TransferStatus> s = engine.getTransferStatus(*batch, i);
      out.push_back(s.ok() ? *s : TransferStatus{});
    }
  }
  EXPECT_TRUE(engine.freeBatchID(*batch).ok());
  return out;
}

TransferStatus RunOne(TransferEngine& engine, const TransferRequest& r) {
  std::vector<TransferStatus> s = RunBatch(engine, {r});
  return s.empty() ? TransferStatus{} : s[0];
}

// Parameter: the directory the files live in ("disk": the system temp dir; "shm": /dev/shm).
class FileBufferTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_IO_URING();
    const std::string base =
        GetParam() == "shm" ? std::string("/dev/shm") : fs::temp_directory_path().string();
    dir_ = std::make_unique<TempDir>(base);
    if (dir_->path.empty() && GetParam() == "shm") {
      GTEST_SKIP() << "no usable /dev/shm here (" << std::strerror(errno) << ")";
    }
    ASSERT_FALSE(dir_->path.empty()) << "mkdtemp under " << base;
    ASSERT_TRUE(engine_.init(FileEngineOptions()).ok());
    Result<SegmentId> self = engine_.openSegment(engine_.localSegmentName());
    ASSERT_TRUE(self.ok()) << self.status();
    self_ = *self;
  }

  std::string File(const std::string& name) const { return dir_->path + "/" + name; }

  std::unique_ptr<TempDir> dir_;
  TransferEngine engine_;
  SegmentId self_ = 0;
};

INSTANTIATE_TEST_SUITE_P(Dirs, FileBufferTest, ::testing::Values("disk", "shm"),
                         [](const auto& info) { return info.param; });

// Round trips at odd sizes and offsets, O_DIRECT where aligned and the page cache where not
// (reported in TransferStatus::file_io), the window mapped at its file offset, and the bytes
// around the window never touched, also by requests that leave it.
TEST_P(FileBufferTest, RoundTripsInsideTheWindowAndNothingOutside) {
  const std::string path = File("window");
  const uint64_t file_size = 8 * kMiB;
  const uint64_t window_offset = kMiB + 3 * 4096;
  const uint64_t window = 4 * kMiB;
  MakeFile(path, file_size, 1);
  Result<uint64_t> addr = engine_.registerLocalFile(path, window, window_offset);
  ASSERT_TRUE(addr.ok()) << addr.status();

  Memory src(8 * kMiB);
  Memory dst(8 * kMiB);
  ASSERT_TRUE(engine_.registerLocalMemory(src.data, src.size).ok());
  ASSERT_TRUE(engine_.registerLocalMemory(dst.data, dst.size).ok());
  for (size_t i = 0; i < src.size; ++i) src.data[i] = Pattern(i, 2);

  // The published buffer: the window's length, reachable through the file transport only.
  ASSERT_TRUE(engine_.syncSegmentCache(engine_.localSegmentName()).ok());
  Result<std::vector<SegmentBuffer>> buffers = engine_.getSegmentBuffers(self_);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  bool published = false;
  for (const SegmentBuffer& b : *buffers) {
    if (b.addr == *addr) {
      published = true;
      EXPECT_EQ(b.length, window);
      EXPECT_EQ(b.transports, std::vector<std::string>{"file"});
    }
  }
  EXPECT_TRUE(published);

  std::vector<uint8_t> expected = ReadFile(path, 0, file_size);
  // Whether this directory's file system takes O_DIRECT at 4096-byte alignment (the temp dir
  // may be a tmpfs or overlay that does not, as in some containers): then aligned requests must
  // go direct; elsewhere either path is right.
  bool direct_here = false;
  if (GetParam() == "disk") {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    direct_here = fd >= 0 && ::pread(fd, dst.data, 4096, 0) == 4096;
    if (fd >= 0) ::close(fd);
    if (!direct_here) std::cerr << "no O_DIRECT under " << dir_->path << ": not checked\n";
  }
  struct Case {
    uint64_t src_offset;
    uint64_t target_offset;
    uint64_t length;
  };
  const Case cases[] = {{0, 0, 64 * kKiB},
                        {4096, 8192, 3 * kMiB / 2},
                        {1, 4096, 4096},
                        {5, 7, 1},
                        {4095, 4093, 65537},
                        {123, window - 4097, 4097},
                        {0, window - 3 * kMiB, 3 * kMiB}};
  for (const Case& c : cases) {
    SCOPED_TRACE("target offset " + std::to_string(c.target_offset) + " length " +
                 std::to_string(c.length));
    TransferStatus w = RunOne(engine_, {OpCode::kWrite, src.data + c.src_offset, self_,
                                        *addr + c.target_offset, c.length});
    ASSERT_EQ(w.state, TransferState::kCompleted) << w.reason;
    EXPECT_EQ(w.transport, "file");
    std::memcpy(expected.data() + window_offset + c.target_offset, src.data + c.src_offset,
                c.length);
    std::memset(dst.data, 0, c.length + 8192);
    TransferStatus r = RunOne(engine_, {OpCode::kRead, dst.data + c.src_offset, self_,
                                        *addr + c.target_offset, c.length});
    ASSERT_EQ(r.state, TransferState::kCompleted) << r.reason;
    EXPECT_EQ(std::memcmp(dst.data + c.src_offset, src.data + c.src_offset, c.length), 0);
    const bool aligned =
        c.src_offset % 4096 == 0 && c.target_offset % 4096 == 0 && c.length % 4096 == 0;
    if (direct_here) {  // ext4/xfs: 512- or 4096-byte alignment
      EXPECT_EQ(w.file_io, aligned ? "direct" : "buffered");
      EXPECT_EQ(r.file_io, aligned ? "direct" : "buffered");
    } else {
      EXPECT_FALSE(w.file_io.empty());
    }
  }
  // Requests that leave the window fail and move nothing, on either side of it.
  for (const auto& [offset, length] : std::vector<std::pair<int64_t, uint64_t>>{
           {static_cast<int64_t>(window) - 10, 20}, {-1, 2}, {static_cast<int64_t>(window), 1}}) {
    TransferStatus s = RunOne(engine_, {OpCode::kWrite, src.data, self_, *addr + offset, length});
    EXPECT_EQ(s.state, TransferState::kFailed);
    EXPECT_TRUE(s.reason.code() == StatusCode::kInvalidArgument ||
                s.reason.code() == StatusCode::kNotFound)
        << s.reason;
  }
  EXPECT_EQ(ReadFile(path, 0, file_size), expected);  // inside as written, outside untouched

  // The file address is not memory: refused as a request's local side.
  TransferStatus local =
      RunOne(engine_, {OpCode::kWrite, reinterpret_cast<void*>(*addr), self_, *addr, 16});
  EXPECT_EQ(local.reason.code(), StatusCode::kInvalidArgument) << local.reason;

  // Durable writes complete (after their fdatasync).
  TransferRequest durable{OpCode::kWrite, src.data, self_, *addr, 64 * kKiB};
  durable.sync = true;
  EXPECT_EQ(RunOne(engine_, durable).state, TransferState::kCompleted);
  EXPECT_TRUE(engine_.unregisterLocalFile(*addr).ok());
  EXPECT_EQ(engine_.unregisterLocalFile(*addr).code(), StatusCode::kNotFound);
  // A window past the end of the file is refused, naming it.
  Result<uint64_t> past = engine_.registerLocalFile(path, file_size, 1);
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(past.status().message().find("past its end"), std::string::npos) << past.status();
  EXPECT_EQ(engine_.registerLocalFile(File("missing"), 1).status().code(), StatusCode::kNotFound);
}

// A file truncated or deleted under traffic: the requests it breaks fail with a reason that
// says so; none hangs, none is reported done short.
TEST_P(FileBufferTest, TruncatedOrVanishedFileFailsNamingIt) {
  const std::string path = File("shrinking");
  MakeFile(path, 4 * kMiB, 3);
  Result<uint64_t> addr = engine_.registerLocalFile(path, 4 * kMiB);
  ASSERT_TRUE(addr.ok()) << addr.status();
  Memory mem(4 * kMiB);
  ASSERT_TRUE(engine_.registerLocalMemory(mem.data, mem.size).ok());

  std::atomic<bool> stop{false};
  std::atomic<int> bad{0};
  std::thread traffic([&] {
    while (!stop.load()) {
      std::vector<TransferRequest> reads;
      for (uint64_t i = 0; i < 8; ++i) {
        reads.push_back(
            {OpCode::kRead, mem.data + i * 512 * kKiB, self_, *addr + i * 512 * kKiB, 512 * kKiB});
      }
      for (const TransferStatus& s : RunBatch(engine_, reads)) {
        if (s.state == TransferState::kCompleted) continue;
        const std::string& m = s.reason.message();
        if (m.find("truncated") == std::string::npos && m.find("ended") == std::string::npos) {
          ++bad;
          ADD_FAILURE() << s.reason;
        }
      }
    }
  });
  ASSERT_EQ(::truncate(path.c_str(), kMiB), 0);
  // After the truncation every read past it fails, naming it.
  TransferStatus after = RunOne(engine_, {OpCode::kRead, mem.data, self_, *addr + 2 * kMiB, 4096});
  stop = true;
  traffic.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(after.state, TransferState::kFailed);
  EXPECT_NE(after.reason.message().find("truncated to 1048576 bytes"), std::string::npos)
      << after.reason;
  // The window is broken: inside what is left too, every access fails naming it.
  TransferStatus inside = RunOne(engine_, {OpCode::kWrite, mem.data, self_, *addr, 4096});
  EXPECT_EQ(inside.state, TransferState::kFailed);
  EXPECT_NE(inside.reason.message().find("truncated"), std::string::npos) << inside.reason;
  ASSERT_EQ(::unlink(path.c_str()), 0);
  TransferStatus gone = RunOne(engine_, {OpCode::kWrite, mem.data, self_, *addr, 4096});
  EXPECT_EQ(gone.state, TransferState::kFailed);
  EXPECT_NE(gone.reason.message().find("vanished"), std::string::npos) << gone.reason;
}

// Batches from several threads at once, each to its own part of the file, then every byte
// checked in the file.
TEST_P(FileBufferTest, ConcurrentBatchesLandWhereTheyWereSent) {
  const std::string path = File("concurrent");
  constexpr int kThreads = 4;
  constexpr uint64_t kPart = 2 * kMiB;
  MakeFile(path, kThreads * kPart, 4);
  Result<uint64_t> addr = engine_.registerLocalFile(path, kThreads * kPart);
  ASSERT_TRUE(addr.ok()) << addr.status();
  Memory mem(kThreads * kPart);
  for (uint64_t i = 0; i < mem.size; ++i) mem.data[i] = Pattern(i, 5);
  ASSERT_TRUE(engine_.registerLocalMemory(mem.data, mem.size).ok());
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      const uint64_t base = t * kPart;
      for (uint64_t done = 0; done < kPart;) {  // batches of up to 8 odd-sized writes
        std::vector<TransferRequest> batch;
        for (int i = 0; i < 8 && done < kPart; ++i) {
          const uint64_t n = std::min<uint64_t>(kPart - done, 1 + rng() % (96 * kKiB));
          batch.push_back({OpCode::kWrite, mem.data + base + done, self_, *addr + base + done, n});
          done += n;
        }
        for (const TransferStatus& s : RunBatch(engine_, batch)) {
          if (s.state != TransferState::kCompleted) ++failed;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.load(), 0);
  std::vector<uint8_t> file = ReadFile(path, 0, kThreads * kPart);
  EXPECT_EQ(std::memcmp(file.data(), mem.data, file.size()), 0);
}

// Unregistering during traffic: it waits for the I/O in flight, then nothing more reaches the
// file; every request ends COMPLETED or FAILED with a reason, none hangs.
TEST_P(FileBufferTest, UnregisterDuringTrafficDrainsThenFencesTheFile) {
  const std::string path = File("unregister");
  MakeFile(path, 4 * kMiB, 6);
  Result<uint64_t> addr = engine_.registerLocalFile(path, 4 * kMiB);
  ASSERT_TRUE(addr.ok()) << addr.status();
  Memory mem(4 * kMiB);
  std::memset(mem.data, 0x5a, mem.size);
  ASSERT_TRUE(engine_.registerLocalMemory(mem.data, mem.size).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> completed{0};
  std::atomic<int> refused{0};
  std::atomic<int> unexpected{0};
  std::thread traffic([&] {
    while (!stop.load()) {
      std::vector<TransferRequest> batch;
      for (uint64_t i = 0; i < 16; ++i) {
        batch.push_back(
            {OpCode::kWrite, mem.data + i * 256 * kKiB, self_, *addr + i * 256 * kKiB, 256 * kKiB});
      }
      for (const TransferStatus& s : RunBatch(engine_, batch)) {
        if (s.state == TransferState::kCompleted) {
          ++completed;
        } else if (s.reason.code() == StatusCode::kStale ||
                   s.reason.code() == StatusCode::kNotFound ||
                   s.reason.code() == StatusCode::kInvalidArgument) {
          ++refused;
        } else {
          ++unexpected;
          ADD_FAILURE() << s.reason;
        }
      }
    }
  });
  ASSERT_TRUE(WaitFor([&] { return completed.load() > 32; }, 20s));
  ASSERT_TRUE(engine_.unregisterLocalFile(*addr).ok());
  // From here nothing may write the file: overwrite it, let traffic run on, check it stayed.
  MakeFile(path, 4 * kMiB, 7);
  const int before = refused.load();
  ASSERT_TRUE(WaitFor([&] { return refused.load() > before + 32; }, 20s));
  stop = true;
  traffic.join();
  EXPECT_EQ(unexpected.load(), 0);
  std::vector<uint8_t> file = ReadFile(path, 0, 4 * kMiB);
  for (uint64_t i = 0; i < file.size(); ++i) {
    if (file[i] != Pattern(i, 7)) {
      ADD_FAILURE() << "byte " << i << " written after unregister";
      break;
    }
  }
}

// Another engine on this host reaches the file directly: its path map names this host, and the
// file there has the published identity. Replaced by another file at the same path, it is no
// longer the same file: refused, naming why.
TEST_P(FileBufferTest, PeerOnThisHostOpensTheFileThroughThePathMap) {
  const std::string path = File("shared");
  MakeFile(path, 2 * kMiB, 8);
  Result<uint64_t> addr = engine_.registerLocalFile(path, kMiB, kMiB, {{"some-other-host", "/x"}});
  ASSERT_TRUE(addr.ok()) << addr.status();
  TransferEngine peer;
  ASSERT_TRUE(peer.init(FileEngineOptions()).ok());
  Result<SegmentId> owner = peer.openSegment(engine_.localSegmentName());
  ASSERT_TRUE(owner.ok()) << owner.status();
  Memory mem(kMiB);
  for (uint64_t i = 0; i < mem.size; ++i) mem.data[i] = Pattern(i, 9);
  ASSERT_TRUE(peer.registerLocalMemory(mem.data, mem.size).ok());
  TransferStatus w = RunOne(peer, {OpCode::kWrite, mem.data, *owner, *addr + 100, 300 * kKiB});
  ASSERT_EQ(w.state, TransferState::kCompleted) << w.reason;
  EXPECT_EQ(w.transport, "file");
  std::vector<uint8_t> file = ReadFile(path, kMiB + 100, 300 * kKiB);
  EXPECT_EQ(std::memcmp(file.data(), mem.data, file.size()), 0);
  EXPECT_EQ(ReadFile(path, kMiB + 99, 1)[0], Pattern(kMiB + 99, 8));

  // Another file at the same path: not the published one.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  MakeFile(path, 2 * kMiB, 10);
  TransferEngine late;
  ASSERT_TRUE(late.init(FileEngineOptions()).ok());
  Result<SegmentId> again = late.openSegment(engine_.localSegmentName());
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(late.registerLocalMemory(mem.data, mem.size).ok());
  TransferStatus other = RunOne(late, {OpCode::kWrite, mem.data, *again, *addr, 4096});
  EXPECT_EQ(other.state, TransferState::kFailed);
  EXPECT_NE(other.reason.message().find("another file"), std::string::npos) << other.reason;
  EXPECT_EQ(ReadFile(path, kMiB, 1)[0], Pattern(kMiB, 10));
}

// A full file system: writes fail with ENOSPC named, and complete again once there is room.
// The file system is a size-limited tmpfs this test mounts (root only; skipped otherwise).
TEST(FileBufferFullTest, FullFileSystemFailsNamingEnospc) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir(fs::temp_directory_path().string());
  ASSERT_FALSE(dir.path.empty());
  const std::string mnt = dir.path + "/small";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0700), 0);
  if (::mount("ferry-test", mnt.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a size-limited tmpfs here (" << std::strerror(errno)
                 << "; needs root): full file system case not run";
  }
  // Unmounted on every path out of the test (a failed assertion included), and as soon as the
  // engine holds the file open: detached, the file system lives on for the open file only, and
  // a test killed from then on leaves no mount behind.
  struct Unmount {
    std::string at;
    void Now() {
      if (!at.empty()) ::umount2(at.c_str(), MNT_DETACH);
      at.clear();
    }
    ~Unmount() { Now(); }
  } unmount{mnt};
  const std::string path = mnt + "/spill";
  {
    const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 4 * kMiB), 0);  // sparse: larger than the file system
    ::close(fd);
  }
  TransferEngine engine;
  ASSERT_TRUE(engine.init(FileEngineOptions()).ok());
  Result<SegmentId> self = engine.openSegment(engine.localSegmentName());
  ASSERT_TRUE(self.ok());
  Result<uint64_t> addr = engine.registerLocalFile(path, 4 * kMiB);
  ASSERT_TRUE(addr.ok()) << addr.status();
  unmount.Now();
  Memory mem(4 * kMiB);
  std::memset(mem.data, 0x77, mem.size);
  ASSERT_TRUE(engine.registerLocalMemory(mem.data, mem.size).ok());
  TransferStatus full = RunOne(engine, {OpCode::kWrite, mem.data, *self, *addr, 4 * kMiB});
  EXPECT_EQ(full.state, TransferState::kFailed);
  EXPECT_NE(full.reason.message().find("ENOSPC"), std::string::npos) << full.reason;
  // What fits still goes.
  TransferStatus small = RunOne(engine, {OpCode::kWrite, mem.data, *self, *addr, 64 * kKiB});
  EXPECT_EQ(small.state, TransferState::kCompleted) << small.reason;
  EXPECT_TRUE(engine.unregisterLocalFile(*addr).ok());
}

}  // namespace
}  // namespace ferry
