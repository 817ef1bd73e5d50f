// The transport conformance suite: the same cases for every registered transport (see
// conformance.h). Each case starts fresh transports in this process, with TestContexts standing
// in for their engines, registers memory on both sides as the engine does, and checks what
// every transport promises through the Transport seam.
#include "transport/conformance/conformance.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "transport/conformance/test_context.h"

namespace ferry::conformance {
namespace {

using namespace std::chrono_literals;
using transport_testing::SliceBatch;
using transport_testing::TargetBytes;
using transport_testing::TestContext;

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr auto kWait = 30s;  // bound on any batch's completions
// File buffers sit at addresses no memory occupies, as the engine assigns them, 64 MiB apart.
constexpr uint64_t kFileAddrBase = uint64_t{0xf} << 60;
constexpr uint64_t kFileAddrSpan = uint64_t{64} << 20;

uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }  // NOLINT

// n recognisable bytes, different for each seed.
std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(seed * 131 + i * 31 + (i >> 9));
  return bytes;
}

// One engine's worth: a context, a started transport and what it published. For a transport
// with file buffers, a target side shares the initiator's context and transport (one engine
// reaching its own file buffers; see Target::file_directory).
struct Side {
  std::string segment;
  std::shared_ptr<TestContext> ctx;
  std::shared_ptr<Transport> transport;
  std::string published;
  bool files = false;  // its buffers are file windows

  SegmentDesc Desc() const {
    SegmentDesc desc;
    desc.name = segment;
    desc.incarnation = ctx->incarnation();
    desc.transports[std::string(transport->name())] = published;
    return desc;
  }
};

// Registered memory, or a registered file window, on one side.
struct Region {
  std::shared_ptr<uint8_t> memory;  // the allocation (may be larger than the registration)
  // The allocation's (or the file's) bytes: the only way the cases set and check them.
  std::unique_ptr<TargetBytes> bytes;
  // Start of the registration: `offset` bytes into the allocation. Never dereferenced (a file
  // window's address is no memory's, and a device's memory is not the CPU's): it is an address
  // in slices only.
  uint8_t* data = nullptr;
  size_t offset = 0;
  size_t length = 0;
  uint64_t generation = 0;
  std::string key;
};

class ConformanceTest : public ::testing::TestWithParam<Target> {
 protected:
  void SetUp() override {
    if (GetParam().unavailable) {
      const std::string why = GetParam().unavailable();
      if (!why.empty()) GTEST_SKIP() << GetParam().name << ": " << why;
    }
    initiator_ = StartSide("initiator", 0x1111);
    files_ = initiator_->transport->capabilities().file_buffers;
    target_ = StartSide("target", 0x7a7a7a);
  }

  void TearDown() override {
    // Transports stop first (failing what is in flight), then the memory goes, then the
    // transports themselves: shared allocations are freed through their still-living owner.
    for (auto& side : sides_) side->transport->Stop();
    regions_.clear();
    sides_.clear();
  }

  Side* StartSide(const std::string& segment, uint64_t incarnation) {
    auto side = std::make_unique<Side>();
    side->segment = segment;
    if (files_) {  // the initiator's own engine, under another segment name
      const Side& engine = *sides_.front();
      side->ctx = engine.ctx;
      side->transport = engine.transport;
      side->published = engine.published;
      side->files = true;
      sides_.push_back(std::move(side));
      return sides_.back().get();
    }
    side->ctx = std::make_unique<TestContext>(incarnation);
    side->transport = GetParam().make();
    Result<std::string> published = side->transport->Start(side->ctx.get(), {segment, "127.0.0.1"});
    EXPECT_TRUE(published.ok()) << published.status();
    if (published.ok()) side->published = *published;
    for (auto& other : sides_) {
      other->ctx->AddPeer(segment, side->transport.get());
      side->ctx->AddPeer(other->segment, other->transport.get());
    }
    sides_.push_back(std::move(side));
    return sides_.back().get();
  }

  // Allocates `allocation` bytes on `side` and registers [offset, offset + length) of them,
  // with `access` (a kLocal region is also local-only in the side's context, as the engine's
  // registry would have it).
  Region* Register(Side* side, size_t length, size_t allocation = 0, size_t offset = 0,
                   uint64_t generation = 7, MemoryAccess access = MemoryAccess::kRemote) {
    if (allocation == 0) allocation = length;
    auto region = std::make_unique<Region>();
    const Target& target = GetParam();
    region->offset = offset;
    region->length = length;
    region->generation = generation;
    if (side->files) {
      const std::string dir = target.file_directory.empty()
                                  ? std::filesystem::temp_directory_path().string()
                                  : target.file_directory;
      Result<std::unique_ptr<TargetBytes>> file = TargetBytes::File(dir, allocation);
      EXPECT_TRUE(file.ok()) << file.status();
      if (!file.ok()) return nullptr;
      region->bytes = std::move(file).value();
      EXPECT_TRUE(SetBacking(region.get(), 0, 0xAA, allocation));
      region->data = reinterpret_cast<uint8_t*>(kFileAddrBase + next_file_++ * kFileAddrSpan);
      EXPECT_LE(allocation, kFileAddrSpan / 2) << "file window addresses would overlap";
      Result<FileWindow> window =
          side->transport->RegisterFile(Addr(region->data), length, region->bytes->path(), offset);
      EXPECT_TRUE(window.ok()) << window.status();
      if (!window.ok()) return nullptr;
      side->ctx->AddRegion(region->data, length, generation, access == MemoryAccess::kRemote,
                           target.transport);
      regions_.push_back(std::move(region));
      return regions_.back().get();
    }
    if (target.allocate) {
      Result<std::shared_ptr<uint8_t>> memory = target.allocate(*side->transport, allocation);
      EXPECT_TRUE(memory.ok()) << memory.status();
      if (!memory.ok()) return nullptr;
      region->memory = *memory;
    } else {
      region->memory =
          std::shared_ptr<uint8_t>(new uint8_t[allocation], [](uint8_t* p) { delete[] p; });
    }
    region->bytes = TargetBytes::Memory(region->memory, allocation, target.copy);
    EXPECT_TRUE(SetBacking(region.get(), 0, 0xAA, allocation));
    region->data = region->memory.get() + offset;
    Result<std::string> key =
        side->transport->RegisterMemory(Addr(region->data), length, target.location, access);
    // A transport with file buffers reaches memory through the engine: NotFound, as the engine
    // takes it, means it registers none.
    if (files_ && key.status().code() == StatusCode::kNotFound) key = std::string();
    EXPECT_TRUE(key.ok()) << key.status();
    if (!key.ok()) return nullptr;
    region->key = *key;
    side->ctx->AddRegion(region->data, length, generation, access == MemoryAccess::kRemote,
                         target.transport);
    regions_.push_back(std::move(region));
    return regions_.back().get();
  }

  // Unregisters `r` from `side`'s transport, as the registry's unregister step 3 does (after
  // CloseRegion and the drain).
  Status UnregisterFromTransport(Side* side, const Region* r) {
    if (side->files) return side->transport->UnregisterFile(Addr(r->data));
    return side->transport->UnregisterMemory(Addr(r->data), r->length);
  }
  // Registers `r`'s range with `side`'s transport again (memory, or the same file window).
  Status RegisterAgain(Side* side, Region* r) {
    if (side->files) {
      return side->transport->RegisterFile(Addr(r->data), r->length, r->bytes->path(), r->offset)
          .status();
    }
    Result<std::string> key = side->transport->RegisterMemory(
        Addr(r->data), r->length, GetParam().location, MemoryAccess::kRemote);
    if (key.ok()) r->key = *key;
    return key.status();
  }

  // The bytes of a region, on either side, are reached only through its TargetBytes (memcpy,
  // Target::copy, or pread/pwrite), so that the cases run unchanged on memory the CPU must not
  // touch. Positions of Bytes, Fill and Set count from the registration's start
  // (and may reach into the guard bytes after it); those of the Backing forms from the
  // allocation's (guard bytes before the registration included). Several threads may use them on
  // disjoint ranges (TargetBytes' thread contract).

  // [pos, pos + n) of `r`, read from its memory or file. A failure to read is reported, and
  // gives zeros.
  static std::vector<uint8_t> Bytes(const Region* r, size_t pos, size_t n) {
    return BackingBytes(r, r->offset + pos, n);
  }
  static std::vector<uint8_t> BackingBytes(const Region* r, size_t pos, size_t n) {
    Result<std::vector<uint8_t>> got = r->bytes->Read(pos, n);
    if (!got.ok()) {
      ADD_FAILURE() << "reading a region's bytes: " << got.status();
      return std::vector<uint8_t>(n, 0);
    }
    return std::move(got).value();
  }
  static uint8_t ByteAt(const Region* r, size_t pos) { return Bytes(r, pos, 1)[0]; }
  // Writes Pattern(n, seed) to [pos, pos + n) of `r` and returns it, for the case to compare
  // what moved against. A failure to write is reported.
  static std::vector<uint8_t> Fill(Region* r, size_t pos, size_t n, uint32_t seed) {
    return FillBacking(r, r->offset + pos, n, seed);
  }
  static std::vector<uint8_t> FillBacking(Region* r, size_t pos, size_t n, uint32_t seed) {
    std::vector<uint8_t> pattern = Pattern(n, seed);
    const Status written = r->bytes->Write(pos, pattern.data(), n);
    if (!written.ok()) ADD_FAILURE() << "writing a region's bytes: " << written;
    return pattern;
  }
  // Sets [pos, pos + n) of `r` to `value`.
  static ::testing::AssertionResult Set(Region* r, size_t pos, uint8_t value, size_t n) {
    return SetBacking(r, r->offset + pos, value, n);
  }
  static ::testing::AssertionResult SetBacking(Region* r, size_t pos, uint8_t value, size_t n) {
    const Status set = r->bytes->Set(pos, value, n);
    if (!set.ok()) return ::testing::AssertionFailure() << "setting a region's bytes: " << set;
    return ::testing::AssertionSuccess();
  }
  // The first position in `bytes` that is not `value`, or npos.
  static size_t FirstNot(const std::vector<uint8_t>& bytes, uint8_t value) {
    auto it = std::find_if(bytes.begin(), bytes.end(), [value](uint8_t b) { return b != value; });
    return it == bytes.end() ? std::string::npos : static_cast<size_t>(it - bytes.begin());
  }

  std::shared_ptr<PeerLink> Connect(Side* target) {
    Result<std::shared_ptr<PeerLink>> link = initiator_->transport->Connect(target->Desc());
    EXPECT_TRUE(link.ok()) << link.status();
    return link.ok() ? *link : nullptr;
  }

  // A registered remote region on the target, a registered local one, and a link to the
  // target: what most cases start from. ok() is false (after a reported failure) otherwise.
  struct Setup {
    Region* remote = nullptr;
    Region* local = nullptr;
    std::shared_ptr<PeerLink> link;
    bool ok() const { return remote != nullptr && local != nullptr && link != nullptr; }
  };
  Setup Prepare(size_t remote_length, size_t local_length) {
    Setup s;
    s.remote = Register(target_, remote_length);
    s.local = Register(initiator_, local_length);
    if (s.remote != nullptr && s.local != nullptr) s.link = Connect(target_);
    return s;
  }

  // One small write that must succeed (connection set-up before the case's real work).
  ::testing::AssertionResult WriteOnce(const Setup& s) {
    SliceBatch warm(initiator_->ctx.get());
    warm.Add(Make(OpCode::kWrite, s.local->data, target_, s.remote, 0, 4096));
    if (auto run = Run(*s.link, warm); !run) return run;
    return AllOk(warm);
  }

  static Slice Make(OpCode op, const uint8_t* local, const Side* target, const Region* remote,
                    size_t remote_offset, size_t length) {
    Slice s;
    s.op = op;
    s.local_addr = Addr(local);
    s.remote_addr = Addr(remote->data) + remote_offset;
    s.length = length;
    s.remote_generation = remote->generation;
    s.peer_incarnation = target->ctx->incarnation();
    s.remote_key = remote->key;
    return s;
  }

  // Submits (retrying Again within the bound) and waits for every completion.
  ::testing::AssertionResult Run(PeerLink& link, const SliceBatch& batch) {
    const auto deadline = std::chrono::steady_clock::now() + kWait;
    Status s = initiator_->transport->Submit(link, batch.ptrs);
    while (s.code() == StatusCode::kAgain && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(200us);
      s = initiator_->transport->Submit(link, batch.ptrs);
    }
    if (!s.ok()) return ::testing::AssertionFailure() << "Submit: " << s;
    if (!initiator_->ctx->WaitAll(batch.ptrs, kWait)) {
      return ::testing::AssertionFailure() << "slices did not complete within the bound";
    }
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult AllOk(const SliceBatch& batch) {
    for (Slice* s : batch.ptrs) {
      Status st = initiator_->ctx->StatusOf(s);
      if (!st.ok()) return ::testing::AssertionFailure() << st;
    }
    return ::testing::AssertionSuccess();
  }

  Side* initiator_ = nullptr;
  Side* target_ = nullptr;
  bool files_ = false;      // the transport's target buffers are file windows
  uint64_t next_file_ = 0;  // file windows registered so far (their addresses)
  std::vector<std::unique_ptr<Side>> sides_;
  std::vector<std::unique_ptr<Region>> regions_;
};

TEST_P(ConformanceTest, WriteReadVerifyAtOddSizesAndAlignments) {
  Setup setup = Prepare(8 * kMiB, 16 * kMiB);
  ASSERT_TRUE(setup.ok());
  Region* remote = setup.remote;
  Region* local = setup.local;
  std::shared_ptr<PeerLink> link = setup.link;
  const size_t sizes[] = {1, 3, 4095, 4096, 4097, 65537, kMiB + 13, 3 * kMiB};
  const size_t offsets[] = {0, 1, 7, 4093};
  uint32_t seed = 1;
  size_t step = 0;
  for (size_t size : sizes) {
    for (size_t offset : offsets) {
      SCOPED_TRACE("size " + std::to_string(size) + " offset " + std::to_string(offset));
      // Another alignment there, and the other half of the region than the step before: a
      // write must not land where the previous read's bytes were sent from, because the target
      // may release that read's pin a moment after the initiator saw the bytes, an order only
      // the kernel's socket buffer gives (ThreadSanitizer cannot see it).
      const size_t half = (++step % 2) * 4 * kMiB;
      const size_t remote_offset = half + (offset * 3 + 64) % 4096 + 5;
      uint8_t* src = local->data + offset;
      uint8_t* back = local->data + 8 * kMiB + offset;
      const std::vector<uint8_t> sent = Fill(local, offset, size, ++seed);
      ASSERT_TRUE(Set(local, 8 * kMiB + offset, 0, size));
      const uint8_t before = ByteAt(remote, remote_offset - 1);
      const uint8_t after = ByteAt(remote, remote_offset + size);
      SliceBatch write(initiator_->ctx.get());
      write.Add(Make(OpCode::kWrite, src, target_, remote, remote_offset, size));
      ASSERT_TRUE(Run(*link, write));
      ASSERT_TRUE(AllOk(write));
      ASSERT_TRUE(Bytes(remote, remote_offset, size) == sent);
      EXPECT_EQ(before, ByteAt(remote, remote_offset - 1)) << "a byte landed before the range";
      EXPECT_EQ(after, ByteAt(remote, remote_offset + size)) << "a byte landed after the range";
      SliceBatch read(initiator_->ctx.get());
      read.Add(Make(OpCode::kRead, back, target_, remote, remote_offset, size));
      ASSERT_TRUE(Run(*link, read));
      ASSERT_TRUE(AllOk(read));
      ASSERT_TRUE(Bytes(local, 8 * kMiB + offset, size) == sent);
    }
  }
}

TEST_P(ConformanceTest, ZeroLengthSlicesCompleteAndMoveNothing) {
  Setup setup = Prepare(64 * kKiB, 64 * kKiB);
  ASSERT_TRUE(setup.ok());
  Region* remote = setup.remote;
  Region* local = setup.local;
  std::shared_ptr<PeerLink> link = setup.link;
  const std::vector<uint8_t> snapshot = Bytes(remote, 0, remote->length);
  Fill(local, 0, local->length, 9);
  SliceBatch batch(initiator_->ctx.get());
  batch.Add(Make(OpCode::kWrite, local->data, target_, remote, 0, 0));
  batch.Add(Make(OpCode::kRead, local->data, target_, remote, 100, 0));
  batch.Add(Make(OpCode::kWrite, local->data, target_, remote, remote->length, 0));
  ASSERT_TRUE(Run(*link, batch));
  EXPECT_TRUE(AllOk(batch));
  EXPECT_TRUE(Bytes(remote, 0, remote->length) == snapshot);
  EXPECT_EQ(0u, initiator_->ctx->duplicate_completions());
}

TEST_P(ConformanceTest, OutOfRangeAccessIsRefusedAndNothingIsWritten) {
  // Register only the middle of a larger allocation: the bytes around it must stay untouched.
  constexpr size_t kAlloc = 2 * kMiB;
  constexpr size_t kOffset = 512 * kKiB;
  constexpr size_t kLength = 256 * kKiB;
  Region* remote = Register(target_, kLength, kAlloc, kOffset);
  Region* local = Register(initiator_, kMiB);
  ASSERT_TRUE(remote && local);
  std::shared_ptr<PeerLink> link = Connect(target_);
  ASSERT_TRUE(link);
  Fill(local, 0, local->length, 3);
  const std::vector<uint8_t> snapshot = BackingBytes(remote, 0, kAlloc);

  SliceBatch batch(initiator_->ctx.get());
  Slice* crossing_end =
      batch.Add(Make(OpCode::kWrite, local->data, target_, remote, kLength - 10, 20));
  Slice* beyond =
      batch.Add(Make(OpCode::kWrite, local->data, target_, remote, kLength + 4096, 64 * kKiB));
  Slice before = Make(OpCode::kWrite, local->data, target_, remote, 0, 64 * kKiB);
  before.remote_addr -= 128 * kKiB;  // starts before the region
  Slice* starts_before = batch.Add(before);
  Slice* read_crossing =
      batch.Add(Make(OpCode::kRead, local->data, target_, remote, kLength - 4096, 8192));
  ASSERT_TRUE(Run(*link, batch));
  for (Slice* s : {crossing_end, beyond, starts_before, read_crossing}) {
    EXPECT_FALSE(initiator_->ctx->StatusOf(s).ok()) << "an out-of-range access was allowed";
  }
  EXPECT_TRUE(BackingBytes(remote, 0, kAlloc) == snapshot)
      << "an out-of-range write changed target memory";
}

// A local-only region is never published, but a peer may guess or learn its address and the key
// its transport made for it (the rdma rkey, the shm buffer id...). Requests crafted with exactly
// those fail, and move no byte either way: the region and the guard bytes around it stay as they
// were, and a read returns none of its bytes. A local-only region still works as the local side
// of this process's own transfers.
TEST_P(ConformanceTest, LocalOnlyRegionRefusesPeersEvenWithItsRealKey) {
  if (files_) {
    GTEST_SKIP() << "a file buffer is always published (registerLocalFile has no local-only "
                    "form), and its key is empty: there is no local-only file window to guard";
  }
  constexpr size_t kAlloc = 512 * kKiB;
  constexpr size_t kOffset = 128 * kKiB;
  constexpr size_t kLength = 256 * kKiB;
  Region* secret = Register(target_, kLength, kAlloc, kOffset, 7, MemoryAccess::kLocal);
  Region* open = Register(target_, 64 * kKiB);
  Region* local = Register(initiator_, 2 * kLength, 0, 0, 7, MemoryAccess::kLocal);
  ASSERT_TRUE(secret && open && local);
  std::shared_ptr<PeerLink> link = Connect(target_);
  ASSERT_TRUE(link);

  // The local-only initiator region moves bytes to and from a remote-accessible region.
  const std::vector<uint8_t> sent = Fill(local, 0, 64 * kKiB, 41);
  ASSERT_TRUE(Set(local, kLength, 0, 64 * kKiB));
  SliceBatch allowed(initiator_->ctx.get());
  allowed.Add(Make(OpCode::kWrite, local->data, target_, open, 0, 64 * kKiB));
  ASSERT_TRUE(Run(*link, allowed));
  ASSERT_TRUE(AllOk(allowed)) << "a local-only region could not be a transfer's local side";
  SliceBatch read_back(initiator_->ctx.get());
  read_back.Add(Make(OpCode::kRead, local->data + kLength, target_, open, 0, 64 * kKiB));
  ASSERT_TRUE(Run(*link, read_back));
  ASSERT_TRUE(AllOk(read_back));
  ASSERT_TRUE(Bytes(local, kLength, 64 * kKiB) == sent);

  // Crafted requests at the local-only target region, with its real key and addresses.
  // The region and its guards: recognisable bytes.
  const std::vector<uint8_t> snapshot = FillBacking(secret, 0, kAlloc, 23);
  Fill(local, 0, kLength, 5);
  ASSERT_TRUE(Set(local, kLength, 0x3C, kLength));
  SliceBatch crafted(initiator_->ctx.get());
  crafted.Add(Make(OpCode::kWrite, local->data, target_, secret, 0, kLength));
  crafted.Add(Make(OpCode::kWrite, local->data, target_, secret, 4093, 17));
  crafted.Add(Make(OpCode::kWrite, local->data, target_, secret, kLength - 4096, 4096));
  crafted.Add(Make(OpCode::kRead, local->data + kLength, target_, secret, 0, kLength));
  crafted.Add(Make(OpCode::kRead, local->data + kLength, target_, secret, 8191, 3));
  ASSERT_TRUE(Run(*link, crafted));
  for (Slice* s : crafted.ptrs) {
    const Status st = initiator_->ctx->StatusOf(s);
    EXPECT_EQ(st.code(), StatusCode::kPermissionDenied)
        << (s->op == OpCode::kWrite ? "write" : "read") << " at offset "
        << s->remote_addr - Addr(secret->data) << " of a local-only region: " << st;
  }
  EXPECT_TRUE(BackingBytes(secret, 0, kAlloc) == snapshot)
      << "a crafted write changed the local-only region or its guard bytes";
  const size_t leaked = FirstNot(Bytes(local, kLength, kLength), 0x3C);
  ASSERT_EQ(std::string::npos, leaked)
      << "a crafted read returned bytes of the local-only region, at " << leaked;
  // The refusals cost the link nothing: a request to the open region still goes through.
  SliceBatch after(initiator_->ctx.get());
  after.Add(Make(OpCode::kWrite, local->data, target_, open, 0, 64 * kKiB));
  ASSERT_TRUE(Run(*link, after));
  ASSERT_TRUE(AllOk(after));
  EXPECT_TRUE(Bytes(open, 0, 64 * kKiB) == Bytes(local, 0, 64 * kKiB));
  EXPECT_EQ(0u, initiator_->ctx->duplicate_completions());
}

TEST_P(ConformanceTest, OldKeyAfterReRegistrationIsStale) {
  Setup setup = Prepare(256 * kKiB, 256 * kKiB);
  ASSERT_TRUE(setup.ok());
  Region* remote = setup.remote;
  Region* local = setup.local;
  std::shared_ptr<PeerLink> link = setup.link;
  Fill(local, 0, local->length, 5);
  ASSERT_TRUE(WriteOnce(setup));
  // Unregister in the registry's order (close, drain, transport), then register the same range
  // again under a new generation.
  Region old;  // what the initiator planned against: the address, generation and key
  old.data = remote->data;
  old.generation = remote->generation;
  old.key = remote->key;
  ASSERT_TRUE(target_->ctx->CloseRegion(remote->data));
  ASSERT_TRUE(target_->ctx->WaitNoPins(10s));
  ASSERT_TRUE(UnregisterFromTransport(target_, remote).ok());
  const Status again = RegisterAgain(target_, remote);
  ASSERT_TRUE(again.ok()) << again;
  target_->ctx->AddRegion(remote->data, remote->length, old.generation + 1, true,
                          GetParam().transport);
  ASSERT_TRUE(Set(remote, 0, 0x11, remote->length));

  SliceBatch stale(initiator_->ctx.get());
  Slice* s = stale.Add(Make(OpCode::kWrite, local->data, target_, &old, 0, 64 * kKiB));
  ASSERT_TRUE(Run(*link, stale));
  EXPECT_EQ(StatusCode::kStale, initiator_->ctx->StatusOf(s).code())
      << initiator_->ctx->StatusOf(s);
  const size_t landed = FirstNot(Bytes(remote, 0, remote->length), 0x11);
  EXPECT_EQ(std::string::npos, landed) << "a write with the old key landed at " << landed;
}

TEST_P(ConformanceTest, ConcurrentBatchesFromManyThreads) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 12;
  constexpr int kSlices = 8;
  constexpr size_t kSlice = 24 * kKiB + 13;
  constexpr size_t kStripe = kSlices * kSlice;
  Setup setup = Prepare(kThreads * kStripe, 2 * kThreads * kStripe);
  ASSERT_TRUE(setup.ok());
  Region* remote = setup.remote;
  Region* local = setup.local;
  std::shared_ptr<PeerLink> link = setup.link;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const size_t src_pos = 2 * t * kStripe;  // this thread's stripes of `local`
      const size_t back_pos = src_pos + kStripe;
      uint8_t* src = local->data + src_pos;
      uint8_t* back = local->data + back_pos;
      for (int round = 0; round < kRounds; ++round) {
        const std::vector<uint8_t> sent = Fill(local, src_pos, kStripe, t * 1000 + round);
        SliceBatch write(initiator_->ctx.get());
        SliceBatch read(initiator_->ctx.get());
        for (int i = 0; i < kSlices; ++i) {
          write.Add(Make(OpCode::kWrite, src + i * kSlice, target_, remote,
                         t * kStripe + i * kSlice, kSlice));
          read.Add(Make(OpCode::kRead, back + i * kSlice, target_, remote, t * kStripe + i * kSlice,
                        kSlice));
        }
        if (!Run(*link, write) || !AllOk(write) || !Run(*link, read) || !AllOk(read) ||
            Bytes(local, back_pos, kStripe) != sent) {
          failures.fetch_add(1);
          return;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(0, failures.load());
  EXPECT_EQ(0u, initiator_->ctx->duplicate_completions());
}

TEST_P(ConformanceTest, NoByteLandsAfterUnregisterDuringTraffic) {
  Setup setup = Prepare(kMiB, kMiB);
  ASSERT_TRUE(setup.ok());
  Region* remote = setup.remote;
  Region* local = setup.local;
  std::shared_ptr<PeerLink> link = setup.link;
  Fill(local, 0, local->length, 77);
  std::atomic<bool> stop{false};
  std::atomic<int> hung{0};
  std::atomic<int> ok_after_unregister{0};
  std::atomic<bool> unregistered{false};
  std::atomic<int> batches_before{0};
  std::atomic<int> batches_after{0};
  auto WaitUntil = [](const auto& done, std::chrono::milliseconds bound) {
    const auto until = std::chrono::steady_clock::now() + bound;
    while (!done() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    return done();
  };
  std::thread writer([&] {
    while (!stop.load()) {
      SliceBatch batch(initiator_->ctx.get());
      for (size_t off = 0; off < kMiB; off += 128 * kKiB) {
        batch.Add(Make(OpCode::kWrite, local->data + off, target_, remote, off, 128 * kKiB));
      }
      const bool after = unregistered.load();
      if (!Run(*link, batch)) {
        hung.fetch_add(1);
        return;
      }
      if (after && AllOk(batch)) ok_after_unregister.fetch_add(1);
      (after ? batches_after : batches_before).fetch_add(1);
    }
  });
  // A failed ASSERT below returns early: the writer still stops and is joined.
  struct JoinOnExit {
    std::atomic<bool>& stop;
    std::thread& thread;
    ~JoinOnExit() {
      stop.store(true);
      if (thread.joinable()) thread.join();
    }
  } join_writer{stop, writer};
  // Traffic is flowing before the region closes...
  EXPECT_TRUE(WaitUntil([&] { return batches_before.load() >= 2 || hung.load() > 0; }, 30s));
  ASSERT_TRUE(target_->ctx->CloseRegion(remote->data));
  ASSERT_TRUE(target_->ctx->WaitNoPins(10s)) << "pins did not drain";
  ASSERT_TRUE(UnregisterFromTransport(target_, remote).ok());
  unregistered.store(true);
  // Nothing may change this any more.
  ASSERT_TRUE(Set(remote, 0, 0x5C, remote->length));
  // ...and goes on after it: batches submitted after unregister ran to their end.
  EXPECT_TRUE(WaitUntil([&] { return batches_after.load() >= 3 || hung.load() > 0; }, 30s));
  stop.store(true);
  writer.join();
  EXPECT_EQ(0, hung.load()) << "a batch did not complete within the bound";
  EXPECT_EQ(0, ok_after_unregister.load()) << "a write was reported done after unregister";
  const size_t landed = FirstNot(Bytes(remote, 0, remote->length), 0x5C);
  EXPECT_EQ(std::string::npos, landed) << "a byte landed after unregister, at " << landed;
}

TEST_P(ConformanceTest, ManyPeers) {
  constexpr int kPeers = 6;
  constexpr size_t kSize = 200 * kKiB + 7;
  Region* local = Register(initiator_, 2 * kPeers * kSize);
  ASSERT_TRUE(local);
  std::vector<Side*> peers;
  std::vector<Region*> remotes;
  std::vector<std::shared_ptr<PeerLink>> links;
  for (int i = 0; i < kPeers; ++i) {
    peers.push_back(StartSide("peer" + std::to_string(i), 0x5000 + i));
    remotes.push_back(Register(peers.back(), kSize));
    ASSERT_TRUE(remotes.back());
    links.push_back(Connect(peers.back()));
    ASSERT_TRUE(links.back());
  }
  std::vector<std::unique_ptr<SliceBatch>> writes;
  std::vector<std::vector<uint8_t>> sent;
  for (int i = 0; i < kPeers; ++i) {
    sent.push_back(Fill(local, i * kSize, kSize, 300 + i));
    writes.push_back(std::make_unique<SliceBatch>(initiator_->ctx.get()));
    writes.back()->Add(
        Make(OpCode::kWrite, local->data + i * kSize, peers[i], remotes[i], 0, kSize));
    ASSERT_TRUE(initiator_->transport->Submit(*links[i], writes.back()->ptrs).ok());
  }
  for (int i = 0; i < kPeers; ++i) {
    ASSERT_TRUE(initiator_->ctx->WaitAll(writes[i]->ptrs, kWait));
    ASSERT_TRUE(AllOk(*writes[i]));
    EXPECT_TRUE(Bytes(remotes[i], 0, kSize) == sent[i]) << "peer " << i;
  }
  for (int i = 0; i < kPeers; ++i) {
    const size_t back = (kPeers + i) * kSize;
    SliceBatch read(initiator_->ctx.get());
    read.Add(Make(OpCode::kRead, local->data + back, peers[i], remotes[i], 0, kSize));
    ASSERT_TRUE(Run(*links[i], read));
    ASSERT_TRUE(AllOk(read));
    EXPECT_TRUE(Bytes(local, back, kSize) == sent[i]) << "peer " << i;
  }
}

TEST_P(ConformanceTest, StoppedPeerFailsWithinTheBound) {
  Setup setup = Prepare(256 * kKiB, 256 * kKiB);
  ASSERT_TRUE(setup.ok());
  Region* remote = setup.remote;
  Region* local = setup.local;
  std::shared_ptr<PeerLink> link = setup.link;
  ASSERT_TRUE(WriteOnce(setup));
  target_->transport->Stop();
  const auto start = std::chrono::steady_clock::now();
  SliceBatch batch(initiator_->ctx.get());
  Slice* s = batch.Add(Make(OpCode::kWrite, local->data, target_, remote, 0, 64 * kKiB));
  const Status submitted = initiator_->transport->Submit(*link, batch.ptrs);
  if (submitted.ok()) {
    ASSERT_TRUE(initiator_->ctx->WaitAll(batch.ptrs, kWait)) << "no completion within the bound";
    EXPECT_FALSE(initiator_->ctx->StatusOf(s).ok()) << "a write to a stopped peer succeeded";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 25s);
}

TEST_P(ConformanceTest, StopCompletesEverySliceExactlyOnce) {
  Setup setup = Prepare(4 * kMiB, 4 * kMiB);
  ASSERT_TRUE(setup.ok());
  Region* remote = setup.remote;
  Region* local = setup.local;
  std::shared_ptr<PeerLink> link = setup.link;
  SliceBatch batch(initiator_->ctx.get());
  for (size_t off = 0; off < 4 * kMiB; off += 32 * kKiB) {
    batch.Add(Make(OpCode::kWrite, local->data + off, target_, remote, off, 32 * kKiB));
  }
  const Status submitted = initiator_->transport->Submit(*link, batch.ptrs);
  ASSERT_TRUE(submitted.ok() || submitted.code() == StatusCode::kAgain) << submitted;
  initiator_->transport->Stop();
  if (submitted.ok()) {
    EXPECT_TRUE(initiator_->ctx->WaitAll(batch.ptrs, kWait));
  }
  EXPECT_EQ(0u, initiator_->ctx->duplicate_completions());
  initiator_->transport->Stop();  // idempotent
}

std::string ParamName(const ::testing::TestParamInfo<Target>& info) { return info.param.name; }

}  // namespace

// How gtest prints a failing case's parameter: its name, not its bytes.
void PrintTo(const Target& target, std::ostream* os) { *os << target.name; }

namespace {

INSTANTIATE_TEST_SUITE_P(Transports, ConformanceTest, ::testing::ValuesIn(Targets()), ParamName);

}  // namespace
}  // namespace ferry::conformance
