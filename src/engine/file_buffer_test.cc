// File buffers through the facade (registerLocalFile, the "file" transport on io_uring), with
// real files in a temporary directory on disk and in /dev/shm, and a size-limited tmpfs for the
// full file system. Every byte is checked in the file itself (pread), including the bytes just
// outside the published window.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

// Writes 16 x 256 KiB from `mem` to [addr, +4 MiB) of `segment`, batch after batch on a thread of
// its own until Stop(), counting the writes that completed and those refused because the file
// buffer went (Stale, NotFound, InvalidArgument); any other end fails the test. `transport`, when
// given, is the one every completed write must have gone through.
class WriteTraffic {
 public:
  WriteTraffic(TransferEngine& engine, SegmentId segment, uint64_t addr, uint8_t* mem,
               std::string transport = "")
      : thread_([this, &engine, segment, addr, mem, transport] {
          while (!stop_.load()) {
            std::vector<TransferRequest> batch;
            for (uint64_t i = 0; i < 16; ++i) {
              batch.push_back({OpCode::kWrite, mem + i * 256 * kKiB, segment, addr + i * 256 * kKiB,
                               256 * kKiB});
            }
            for (const TransferStatus& s : RunBatch(engine, batch)) {
              if (s.state == TransferState::kCompleted) {
                if (!transport.empty()) EXPECT_EQ(s.transport, transport);
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
        }) {}
  ~WriteTraffic() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

  std::atomic<int> completed{0};
  std::atomic<int> refused{0};
  std::atomic<int> unexpected{0};

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;  // last: starts once the counters exist
};

// Fails the test at the first byte of the file at `path` that is not Pattern(i, seed).
void ExpectFileHoldsPattern(const std::string& path, uint64_t size, uint8_t seed) {
  std::vector<uint8_t> file = ReadFile(path, 0, size);
  for (uint64_t i = 0; i < file.size(); ++i) {
    if (file[i] != Pattern(i, seed)) {
      ADD_FAILURE() << "byte " << i << " written after unregister";
      break;
    }
  }
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

  // The published buffer: the window's length, reachable through the file transport, and through
  // this engine over tcp for peers that cannot open the file.
  ASSERT_TRUE(engine_.syncSegmentCache(engine_.localSegmentName()).ok());
  Result<std::vector<SegmentBuffer>> buffers = engine_.getSegmentBuffers(self_);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  bool published = false;
  for (const SegmentBuffer& b : *buffers) {
    if (b.addr == *addr) {
      published = true;
      EXPECT_EQ(b.length, window);
      EXPECT_EQ(b.transports, (std::vector<std::string>{"file", "tcp"}));
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
  WriteTraffic traffic(engine_, self_, *addr, mem.data);
  ASSERT_TRUE(WaitFor([&] { return traffic.completed.load() > 32; }, 20s));
  ASSERT_TRUE(engine_.unregisterLocalFile(*addr).ok());
  // From here nothing may write the file: overwrite it, let traffic run on, check it stayed.
  MakeFile(path, 4 * kMiB, 7);
  const int before = traffic.refused.load();
  ASSERT_TRUE(WaitFor([&] { return traffic.refused.load() > before + 32; }, 20s));
  traffic.Stop();
  EXPECT_EQ(traffic.unexpected.load(), 0);
  ExpectFileHoldsPattern(path, 4 * kMiB, 7);
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

  // Another file at the same path: not the published one, so the peer goes through the owner,
  // whose file was deleted: FAILED naming it, and the other file untouched.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  MakeFile(path, 2 * kMiB, 10);
  TransferEngine late;
  ASSERT_TRUE(late.init(FileEngineOptions()).ok());
  Result<SegmentId> again = late.openSegment(engine_.localSegmentName());
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(late.registerLocalMemory(mem.data, mem.size).ok());
  TransferStatus other = RunOne(late, {OpCode::kWrite, mem.data, *again, *addr, 4096});
  EXPECT_EQ(other.state, TransferState::kFailed);
  EXPECT_EQ(other.transport, "tcp");
  EXPECT_NE(other.reason.message().find("vanished"), std::string::npos) << other.reason;
  EXPECT_EQ(ReadFile(path, kMiB, 1)[0], Pattern(kMiB, 10));
}

// ---- through the owner ------------------------------------------------------------------
// A peer that cannot open the file itself reaches it through its owner: the owner's tcp target
// stages the bytes with its file transport (io_uring). To make the file invisible to a reader on
// this host, the owner's file is renamed after registration: the owner keeps its open file, and
// the path its path map names for this host holds nothing (or, below, another file).

// The owner's tcp counter `name` (TransportMetrics::counters).
uint64_t TcpCounter(const TransferEngine& engine, const std::string& name) {
  for (const TransportMetrics& t : engine.getMetrics().transports) {
    if (t.name != "tcp") continue;
    for (const auto& [n, v] : t.counters) {
      if (n == name) return v;
    }
  }
  return 0;
}

// Holds the inode lock of a file, deterministically: a thread writes to the file from a page
// whose first touch userfaultfd holds, and the kernel takes the file's lock before it copies
// the bytes in; until Release, every other write to that file (an io_uring write of the owner
// included) waits in the kernel behind it. Reads do not take that lock. Start returns null,
// saying why in `why`, where userfaultfd is refused (unprivileged without
// vm.unprivileged_userfaultfd, or a seccomp filter).
class FileWriteHold {
 public:
  // Holds `path`'s lock with a 4096-byte write at `offset` (its bytes: `fill`); returns once the
  // writer is inside the held fault (bounded: 10 s).
  static std::unique_ptr<FileWriteHold> Start(const std::string& path, uint64_t offset,
                                              uint8_t fill, std::string* why) {
    std::unique_ptr<FileWriteHold> hold(new FileWriteHold());
    hold->fill_ = fill;
    hold->uffd_ = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (hold->uffd_ < 0) {
      *why = std::string("userfaultfd: ") + std::strerror(errno);
      return nullptr;
    }
    uffdio_api api{};
    api.api = UFFD_API;
    if (::ioctl(hold->uffd_, UFFDIO_API, &api) != 0) {
      *why = std::string("UFFDIO_API: ") + std::strerror(errno);
      return nullptr;
    }
    void* page = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
      *why = std::string("mmap: ") + std::strerror(errno);
      return nullptr;
    }
    hold->page_ = static_cast<uint8_t*>(page);
    uffdio_register reg{};
    reg.range = {reinterpret_cast<uint64_t>(page), kPage};
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    if (::ioctl(hold->uffd_, UFFDIO_REGISTER, &reg) != 0) {
      *why = std::string("UFFDIO_REGISTER: ") + std::strerror(errno);
      return nullptr;
    }
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      *why = path + ": " + std::strerror(errno);
      return nullptr;
    }
    hold->writer_ = std::thread([fd, page = hold->page_, offset, written = &hold->written_] {
      *written = ::pwrite(fd, page, kPage, static_cast<off_t>(offset));
      ::close(fd);
    });
    // The fault arrives once the writer holds the lock (bounded poll on the event).
    pollfd p{hold->uffd_, POLLIN, 0};
    uffd_msg msg{};
    if (::poll(&p, 1, 10000) != 1 || ::read(hold->uffd_, &msg, sizeof(msg)) != sizeof(msg) ||
        msg.event != UFFD_EVENT_PAGEFAULT) {
      *why = "the held write never faulted";
      hold->Release();
      return nullptr;
    }
    return hold;
  }
  ~FileWriteHold() {
    Release();
    if (page_ != nullptr) ::munmap(page_, kPage);
    if (uffd_ >= 0) ::close(uffd_);
  }
  // Lets the held write (and every write behind it) go; returns once it ended. Idempotent.
  void Release() {
    if (!writer_.joinable()) return;
    std::vector<uint8_t> bytes(kPage, fill_);
    uffdio_copy copy{};
    copy.dst = reinterpret_cast<uint64_t>(page_);
    copy.src = reinterpret_cast<uint64_t>(bytes.data());
    copy.len = kPage;
    (void)::ioctl(uffd_, UFFDIO_COPY, &copy);
    writer_.join();
  }
  ssize_t written() const { return written_; }

 private:
  static constexpr uint64_t kPage = 4096;
  FileWriteHold() = default;
  int uffd_ = -1;
  uint8_t* page_ = nullptr;
  uint8_t fill_ = 0;
  ssize_t written_ = -1;
  std::thread writer_;
};

// Reads and writes at odd sizes and offsets through the owner (TransferStatus::transport "tcp"),
// every byte checked in the file, the bytes around the window untouched; requests leaving the
// window refused; many large writes at once stay within the owner's per-connection staging (the
// excess waits, counted); after the owner registers the file again, a request planned against the
// old registration fails Stale (never re-aimed), and the new one is reached after the refresh.
TEST(FileThroughOwnerTest, ReadsAndWritesThroughTheOwnerInsideTheWindowOnly) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir(fs::temp_directory_path().string());
  ASSERT_FALSE(dir.path.empty());
  const std::string path = dir.path + "/owned";
  const std::string moved = dir.path + "/owned.moved";
  const uint64_t file_size = 8 * kMiB;
  const uint64_t window_offset = kMiB + 3 * 4096 + 5;
  const uint64_t window = 4 * kMiB;
  MakeFile(path, file_size, 11);
  TransferEngine owner;
  ASSERT_TRUE(owner.init(FileEngineOptions()).ok());
  Result<uint64_t> addr = owner.registerLocalFile(path, window, window_offset);
  ASSERT_TRUE(addr.ok()) << addr.status();
  ASSERT_EQ(::rename(path.c_str(), moved.c_str()), 0);

  TransferEngine reader;
  ASSERT_TRUE(reader.init(FileEngineOptions()).ok());
  Result<SegmentId> seg = reader.openSegment(owner.localSegmentName());
  ASSERT_TRUE(seg.ok()) << seg.status();
  Memory src(8 * kMiB);
  Memory dst(8 * kMiB);
  for (size_t i = 0; i < src.size; ++i) src.data[i] = Pattern(i, 12);
  ASSERT_TRUE(reader.registerLocalMemory(src.data, src.size).ok());
  ASSERT_TRUE(reader.registerLocalMemory(dst.data, dst.size).ok());

  std::vector<uint8_t> expected = ReadFile(moved, 0, file_size);
  struct Case {
    uint64_t src_offset;
    uint64_t target_offset;
    uint64_t length;
  };
  const Case cases[] = {
      {0, 0, 64 * kKiB},   {4096, 8192, 3 * kMiB / 2}, {5, 7, 1},
      {4095, 4093, 65537}, {123, window - 4097, 4097}, {0, window - 3 * kMiB, 3 * kMiB}};
  for (const Case& c : cases) {
    SCOPED_TRACE("target offset " + std::to_string(c.target_offset) + " length " +
                 std::to_string(c.length));
    TransferStatus w = RunOne(
        reader, {OpCode::kWrite, src.data + c.src_offset, *seg, *addr + c.target_offset, c.length});
    ASSERT_EQ(w.state, TransferState::kCompleted) << w.reason;
    EXPECT_EQ(w.transport, "tcp");  // through the owner
    std::memcpy(expected.data() + window_offset + c.target_offset, src.data + c.src_offset,
                c.length);
    std::memset(dst.data, 0, c.length + 8192);
    TransferStatus r = RunOne(
        reader, {OpCode::kRead, dst.data + c.src_offset, *seg, *addr + c.target_offset, c.length});
    ASSERT_EQ(r.state, TransferState::kCompleted) << r.reason;
    EXPECT_EQ(r.transport, "tcp");
    EXPECT_EQ(std::memcmp(dst.data + c.src_offset, src.data + c.src_offset, c.length), 0);
  }
  for (const auto& [offset, length] : std::vector<std::pair<int64_t, uint64_t>>{
           {static_cast<int64_t>(window) - 10, 20}, {-1, 2}, {static_cast<int64_t>(window), 1}}) {
    TransferStatus s = RunOne(reader, {OpCode::kWrite, src.data, *seg, *addr + offset, length});
    EXPECT_EQ(s.state, TransferState::kFailed);
  }
  EXPECT_EQ(ReadFile(moved, 0, file_size), expected);  // inside as written, outside untouched
  EXPECT_GT(TcpCounter(owner, "staged_accesses"), 0u);

  // 20 reads of the whole window at once, cut into 1 MiB slices over the link's connections:
  // more than one connection's staging (16 MiB) at a time; the excess waits, nothing is lost.
  // (Another reader, without payload checksums: this part is about volume, and stays quick
  // under the sanitizers.)
  EngineOptions bulk_options = FileEngineOptions();
  bulk_options.slice_size = kMiB;
  bulk_options.tcp_payload_checksum = false;
  TransferEngine bulk;
  ASSERT_TRUE(bulk.init(bulk_options).ok());
  Result<SegmentId> bulk_seg = bulk.openSegment(owner.localSegmentName());
  ASSERT_TRUE(bulk_seg.ok()) << bulk_seg.status();
  constexpr int kCopies = 20;
  Memory copies(kCopies * window);
  ASSERT_TRUE(bulk.registerLocalMemory(copies.data, copies.size).ok());
  std::vector<TransferRequest> many;
  for (int i = 0; i < kCopies; ++i) {
    many.push_back({OpCode::kRead, copies.data + i * window, *bulk_seg, *addr, window});
  }
  for (const TransferStatus& s : RunBatch(bulk, many)) {
    EXPECT_EQ(s.state, TransferState::kCompleted) << s.reason;
  }
  for (int i = 0; i < kCopies; ++i) {
    EXPECT_EQ(std::memcmp(copies.data + i * window, expected.data() + window_offset, window), 0)
        << "copy " << i;
  }
  EXPECT_GT(TcpCounter(owner, "staging_waits"), 0u);

  // Registered again (a new registration: a new address and generation): a request planned
  // against the old one is Stale, never re-aimed at the new one.
  ASSERT_TRUE(owner.unregisterLocalFile(*addr).ok());
  Result<uint64_t> again = owner.registerLocalFile(moved, window, window_offset);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(::rename(moved.c_str(), path.c_str()), 0);  // invisible to the reader again
  TransferStatus stale = RunOne(reader, {OpCode::kWrite, dst.data, *seg, *addr, 4096});
  EXPECT_EQ(stale.state, TransferState::kFailed);
  EXPECT_EQ(stale.reason.code(), StatusCode::kStale) << stale.reason;
  TransferStatus fresh = RunOne(reader, {OpCode::kRead, dst.data, *seg, *again + 3, 5000});
  ASSERT_EQ(fresh.state, TransferState::kCompleted) << fresh.reason;
  EXPECT_EQ(fresh.transport, "tcp");
  EXPECT_EQ(std::memcmp(dst.data, expected.data() + window_offset + 3, 5000), 0);
  EXPECT_EQ(ReadFile(path, 0, file_size), expected);
}

// Unregistering on the owner while a peer writes through it: unregisterLocalFile waits for the
// owner-side I/O in flight, and after it returns no byte reaches the file; every request ends
// COMPLETED or FAILED with a reason. Then a file truncated under the owner: a read through it
// fails, naming the truncation.
TEST(FileThroughOwnerTest, UnregisterDrainsOwnerIoAndATruncatedFileFailsNamingIt) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir(fs::temp_directory_path().string());
  ASSERT_FALSE(dir.path.empty());
  const std::string path = dir.path + "/drained";
  const std::string moved = dir.path + "/drained.moved";
  MakeFile(path, 4 * kMiB, 6);
  TransferEngine owner;
  ASSERT_TRUE(owner.init(FileEngineOptions()).ok());
  Result<uint64_t> addr = owner.registerLocalFile(path, 4 * kMiB);
  ASSERT_TRUE(addr.ok()) << addr.status();
  ASSERT_EQ(::rename(path.c_str(), moved.c_str()), 0);
  TransferEngine reader;
  ASSERT_TRUE(reader.init(FileEngineOptions()).ok());
  Result<SegmentId> seg = reader.openSegment(owner.localSegmentName());
  ASSERT_TRUE(seg.ok()) << seg.status();
  Memory mem(4 * kMiB);
  std::memset(mem.data, 0x5a, mem.size);
  ASSERT_TRUE(reader.registerLocalMemory(mem.data, mem.size).ok());
  WriteTraffic traffic(reader, *seg, *addr, mem.data, "tcp");
  // The bytes that overwrite the file the moment unregisterLocalFile returns (made beforehand,
  // so that an owner-side write still under way then would land after them).
  std::vector<uint8_t> after(4 * kMiB);
  for (uint64_t i = 0; i < after.size(); ++i) after[i] = Pattern(i, 7);
  const int fd = ::open(moved.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << moved;
  ASSERT_TRUE(WaitFor([&] { return traffic.completed.load() > 32; }, 20s));
  ASSERT_TRUE(owner.unregisterLocalFile(*addr).ok());
  // From here nothing may write the file: overwrite it, let traffic run on, check it stayed.
  const ssize_t wrote = ::pwrite(fd, after.data(), after.size(), 0);
  ::close(fd);
  ASSERT_EQ(wrote, static_cast<ssize_t>(after.size()));
  const int before = traffic.refused.load();
  ASSERT_TRUE(WaitFor([&] { return traffic.refused.load() > before + 32; }, 20s));
  traffic.Stop();
  EXPECT_EQ(traffic.unexpected.load(), 0);
  ExpectFileHoldsPattern(moved, 4 * kMiB, 7);

  // Truncated under the owner: the owner's read meets it and the reader's task names it.
  Result<uint64_t> second = owner.registerLocalFile(moved, 4 * kMiB);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(::rename(moved.c_str(), path.c_str()), 0);
  ASSERT_TRUE(reader.syncSegmentCache(owner.localSegmentName()).ok());
  TransferStatus ok = RunOne(reader, {OpCode::kRead, mem.data, *seg, *second + 2 * kMiB, 4096});
  ASSERT_EQ(ok.state, TransferState::kCompleted) << ok.reason;
  EXPECT_EQ(ok.transport, "tcp");
  EXPECT_EQ(mem.data[0], Pattern(2 * kMiB, 7));
  ASSERT_EQ(::truncate(path.c_str(), kMiB), 0);
  TransferStatus cut = RunOne(reader, {OpCode::kRead, mem.data, *seg, *second + 2 * kMiB, 4096});
  EXPECT_EQ(cut.state, TransferState::kFailed);
  EXPECT_NE(cut.reason.message().find("truncated to 1048576 bytes"), std::string::npos)
      << cut.reason;
}

// The owner's write to the file held in the kernel (FileWriteHold): unregisterLocalFile cannot
// drain it and ends Timeout, the region closing (a new request fails Stale), nothing of the held
// write in the file yet; once the kernel lets it go it lands and completes, and unregistering
// again drains at once. Deterministic: the owner's I/O is in flight for as long as the test says.
TEST(FileThroughOwnerTest, UnregisterWaitsForAnOwnerWriteHeldInTheKernel) {
  SKIP_WITHOUT_IO_URING();
  // tmpfs: its reads never wait for the held lock (some disk file systems' reads do).
  TempDir dir("/dev/shm");
  ASSERT_FALSE(dir.path.empty());
  const std::string path = dir.path + "/held";
  const std::string moved = dir.path + "/held.moved";
  MakeFile(path, 2 * kMiB, 3);
  EngineOptions options = FileEngineOptions();
  options.unregister_drain_timeout = 200ms;
  auto owned = std::make_unique<TransferEngine>();
  TransferEngine& owner = *owned;
  ASSERT_TRUE(owner.init(options).ok());
  Result<uint64_t> addr = owner.registerLocalFile(path, kMiB);
  ASSERT_TRUE(addr.ok()) << addr.status();
  ASSERT_EQ(::rename(path.c_str(), moved.c_str()), 0);  // the reader goes through the owner
  TransferEngine reader;
  ASSERT_TRUE(reader.init(FileEngineOptions()).ok());
  Result<SegmentId> seg = reader.openSegment(owner.localSegmentName());
  ASSERT_TRUE(seg.ok()) << seg.status();
  Memory mem(64 * kKiB);
  for (uint64_t i = 0; i < mem.size; ++i) mem.data[i] = Pattern(i, 4);
  ASSERT_TRUE(reader.registerLocalMemory(mem.data, mem.size).ok());
  ASSERT_EQ(RunOne(reader, {OpCode::kRead, mem.data, *seg, *addr, 4096}).transport, "tcp");
  for (uint64_t i = 0; i < mem.size; ++i) mem.data[i] = Pattern(i, 4);

  std::string why;
  std::unique_ptr<FileWriteHold> hold =
      FileWriteHold::Start(moved, kMiB + 64 * kKiB, 0xee, &why);  // outside the window
  if (hold == nullptr) GTEST_SKIP() << "cannot hold a file write here: " << why;
  const uint64_t started = TcpCounter(owner, "staged_accesses");
  TransferStatus held;
  std::thread write([&] {
    held = RunOne(reader, {OpCode::kWrite, mem.data, *seg, *addr + 8192, mem.size});
  });
  // The owner started its file write (pinned, in the kernel behind the hold).
  EXPECT_TRUE(WaitFor([&] { return TcpCounter(owner, "staged_accesses") > started; }, 10s));
  const Status first = owner.unregisterLocalFile(*addr);
  EXPECT_EQ(first.code(), StatusCode::kTimeout) << first;  // Ok: it did not wait for the write
  TransferStatus refused = RunOne(reader, {OpCode::kRead, mem.data, *seg, *addr, 4096});
  EXPECT_EQ(refused.reason.code(), StatusCode::kStale) << refused.reason;
  EXPECT_EQ(ReadFile(moved, 8192, 1)[0], Pattern(8192, 3));  // not landed yet
  hold->Release();
  EXPECT_EQ(hold->written(), 4096);
  write.join();
  EXPECT_EQ(held.state, TransferState::kCompleted) << held.reason;
  EXPECT_EQ(held.transport, "tcp");
  const Status second = owner.unregisterLocalFile(*addr);  // resumes the drain: nothing left
  EXPECT_TRUE(second.ok()) << second;
  std::vector<uint8_t> file = ReadFile(moved, 8192, mem.size);
  EXPECT_EQ(std::memcmp(file.data(), mem.data, mem.size), 0);

  // The owner destroyed while its write is held: its tcp target closes the connection (the
  // reader's task fails), and the write, still in the kernel, ends after that into staging that
  // outlived the connection (the sanitizers check); the destructor waits for it.
  Result<uint64_t> last = owner.registerLocalFile(moved, kMiB);
  ASSERT_TRUE(last.ok()) << last.status();
  ASSERT_EQ(::rename(moved.c_str(), path.c_str()), 0);  // invisible to the reader again
  ASSERT_TRUE(reader.syncSegmentCache(owner.localSegmentName()).ok());
  hold = FileWriteHold::Start(path, kMiB + 64 * kKiB, 0xdd, &why);
  ASSERT_NE(hold, nullptr) << why;
  const uint64_t before = TcpCounter(owner, "staged_accesses");
  TransferStatus cut;
  std::thread cut_write([&] {
    cut = RunOne(reader, {OpCode::kWrite, mem.data, *seg, *last, mem.size});
  });
  EXPECT_TRUE(WaitFor([&] { return TcpCounter(owner, "staged_accesses") > before; }, 10s));
  std::thread destroy([&] { owned.reset(); });
  cut_write.join();  // ends once the owner's tcp target is gone
  EXPECT_EQ(cut.state, TransferState::kFailed) << cut.reason;
  hold->Release();
  destroy.join();
}

// The owner's file system full: a write through the owner fails, naming ENOSPC, at once (no
// retry). That answer is the owner's verdict on the request, not on the tcp link: a memory write
// to the owner right after completes over the same connections (none opened anew), and what
// fits in the file still goes. The file system is a size-limited tmpfs this test mounts (root
// only; skipped otherwise).
TEST(FileThroughOwnerTest, OwnersFullFileSystemFailsTheTaskAndKeepsTheLink) {
  SKIP_WITHOUT_IO_URING();
  TempDir dir(fs::temp_directory_path().string());
  ASSERT_FALSE(dir.path.empty());
  const std::string mnt = dir.path + "/small";
  ASSERT_EQ(::mkdir(mnt.c_str(), 0700), 0);
  if (::mount("ferry-test", mnt.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a size-limited tmpfs here (" << std::strerror(errno)
                 << "; needs root): full file system through the owner not run";
  }
  struct Unmount {  // as in FullFileSystemFailsNamingEnospc
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
    // Its first 64 KiB allocated: rewriting them needs no room on a full file system.
    const std::vector<uint8_t> head(64 * kKiB, 1);
    ASSERT_EQ(::pwrite(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
    ::close(fd);
  }
  TransferEngine owner;
  ASSERT_TRUE(owner.init(FileEngineOptions()).ok());
  Result<uint64_t> addr = owner.registerLocalFile(path, 4 * kMiB);
  ASSERT_TRUE(addr.ok()) << addr.status();
  unmount.Now();  // the path is gone: the reader reaches the file through its owner only
  Memory target(8 * kMiB);
  ASSERT_TRUE(owner.registerLocalMemory(target.data, target.size).ok());

  TransferEngine reader;
  ASSERT_TRUE(reader.init(FileEngineOptions()).ok());
  Result<SegmentId> seg = reader.openSegment(owner.localSegmentName());
  ASSERT_TRUE(seg.ok()) << seg.status();
  Memory mem(8 * kMiB);
  for (uint64_t i = 0; i < mem.size; ++i) mem.data[i] = Pattern(i, 9);
  ASSERT_TRUE(reader.registerLocalMemory(mem.data, mem.size).ok());
  const TransferRequest to_memory{OpCode::kWrite, mem.data, *seg,
                                  reinterpret_cast<uint64_t>(target.data), target.size};
  // 8 stripes of one request: every connection of the link opened.
  TransferStatus warm = RunOne(reader, to_memory);
  ASSERT_EQ(warm.state, TransferState::kCompleted) << warm.reason;
  ASSERT_EQ(warm.transport, "tcp");
  const uint64_t opened = TcpCounter(reader, "connections_opened");
  ASSERT_GT(opened, 0u);

  TransferStatus full = RunOne(reader, {OpCode::kWrite, mem.data, *seg, *addr, 4 * kMiB});
  EXPECT_EQ(full.state, TransferState::kFailed);
  EXPECT_EQ(full.transport, "tcp");
  EXPECT_NE(full.reason.message().find("ENOSPC"), std::string::npos) << full.reason;
  EXPECT_EQ(full.retries, 0u) << "the owner's storage error was retried";

  std::memset(target.data, 0, target.size);
  TransferStatus after = RunOne(reader, to_memory);
  ASSERT_EQ(after.state, TransferState::kCompleted) << after.reason;
  EXPECT_EQ(after.transport, "tcp");
  EXPECT_EQ(after.retries, 0u);
  EXPECT_EQ(std::memcmp(target.data, mem.data, target.size), 0);
  EXPECT_EQ(TcpCounter(reader, "connections_opened"), opened) << "the tcp link was dropped";
  TransferStatus head = RunOne(reader, {OpCode::kWrite, mem.data, *seg, *addr, 64 * kKiB});
  EXPECT_EQ(head.state, TransferState::kCompleted) << head.reason;
  EXPECT_TRUE(owner.unregisterLocalFile(*addr).ok());
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
  // The device's verdict about this request (Slice::answered), not a failing transport: no
  // retry, no cool-down.
  EXPECT_EQ(full.retries, 0u) << "the storage error was retried";
  // What fits still goes.
  TransferStatus small = RunOne(engine, {OpCode::kWrite, mem.data, *self, *addr, 64 * kKiB});
  EXPECT_EQ(small.state, TransferState::kCompleted) << small.reason;
  EXPECT_TRUE(engine.unregisterLocalFile(*addr).ok());
}

}  // namespace
}  // namespace ferry
