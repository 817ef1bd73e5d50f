// StagingCopier with host memory standing for the device: its ops copy with memcpy (counting)
// and allocate page-aligned host chunks, so its pipeline, pool, deadlines, errors and stop run
// on any machine. tests/gpu runs it with CUDA's copies, through the engine and tcp.
#include "engine/staging_copier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/wait_for.h"

namespace ferry::engine {
namespace {

using namespace std::chrono_literals;

// What the copier's ops did: bytes copied, chunks handed out, and failures to inject.
struct HostOps {
  Mutex mu;
  std::set<uintptr_t> chunks GUARDED_BY(mu);
  std::atomic<int> copies{0};
  std::atomic<bool> fail_copy{false};
  std::atomic<bool> fail_allocate{false};
  std::atomic<int>* freed = nullptr;  // counts free_pinned calls when set
  // Hold(): copies wait (on the copier's thread) until Let() go.
  CondVar cv;
  bool held GUARDED_BY(mu) = false;
  int waiting GUARDED_BY(mu) = 0;
  void Hold() {
    MutexLock lock(mu);
    held = true;
  }
  void Let() {
    MutexLock lock(mu);
    held = false;
    cv.NotifyAll();
  }
  bool WaitHeldCopy() {
    MutexLock lock(mu);
    const auto bound = std::chrono::steady_clock::now() + 10s;
    while (waiting == 0 && std::chrono::steady_clock::now() < bound) cv.WaitUntil(mu, bound);
    return waiting > 0;
  }

  StagingOps Make() {
    StagingOps ops;
    ops.copy = [this](void* dst, const void* src, size_t length) {
      if (fail_copy.load()) return InternalError("injected copy failure");
      {
        MutexLock lock(mu);
        ++waiting;
        cv.NotifyAll();
        const auto bound = std::chrono::steady_clock::now() + 10s;
        while (held && std::chrono::steady_clock::now() < bound) cv.WaitUntil(mu, bound);
        --waiting;
      }
      std::memcpy(dst, src, length);
      copies.fetch_add(1);
      return Status::Ok();
    };
    ops.allocate_pinned = [this](size_t length) -> Result<void*> {
      if (fail_allocate.load()) return UnavailableError("injected: no pinned memory");
      void* p = std::aligned_alloc(4096, length);
      MutexLock lock(mu);
      chunks.insert(reinterpret_cast<uintptr_t>(p));
      return p;
    };
    ops.free_pinned = [this](void* p) {
      if (freed != nullptr) freed->fetch_add(1);
      std::free(p);
    };
    return ops;
  }
  bool InChunk(uint64_t addr, uint64_t chunk_bytes) {
    MutexLock lock(mu);
    for (uintptr_t c : chunks) {
      if (addr >= c && addr < c + chunk_bytes) return true;
    }
    return false;
  }
};

// A transport whose "remote side" is host memory at remote_addr: it copies on its own thread,
// completing each slice through the context. `hold` keeps slices until Release(); `again`
// answers that many Submits with Again first; `error` fails every slice with it.
class LoopTransport final : public Transport {
 public:
  explicit LoopTransport(TransportContext* ctx) : ctx_(ctx) {
    thread_ = std::thread([this] { Run(); });
  }
  ~LoopTransport() override {
    {
      MutexLock lock(mu_);
      stop_ = true;
      cv_.NotifyAll();
    }
    thread_.join();
  }
  std::string_view name() const override { return "loop"; }
  TransportCapabilities capabilities() const override { return {}; }
  Result<std::string> Start(TransportContext*, const TransportStartInfo&) override { return ""; }
  void Stop() override {}
  Result<std::string> RegisterMemory(uint64_t, uint64_t, const Location&, MemoryAccess) override {
    return std::string();
  }
  Status UnregisterMemory(uint64_t, uint64_t) override { return Status::Ok(); }
  Result<std::shared_ptr<PeerLink>> Connect(const SegmentDesc&) override {
    return std::make_shared<PeerLink>();
  }
  Result<std::string> OnExchange(std::string_view) override { return std::string(); }
  Status Submit(PeerLink&, std::span<Slice* const> slices) override {
    MutexLock lock(mu_);
    if (again_ > 0) {
      --again_;
      ++turned_back_;
      return AgainError("queue full (injected)");
    }
    for (Slice* s : slices) {
      seen_local_.push_back(s->local_addr);
      queue_.push_back(s);
    }
    cv_.NotifyAll();
    return Status::Ok();
  }

  void Hold(bool hold) {
    MutexLock lock(mu_);
    hold_ = hold;
    cv_.NotifyAll();
  }
  void Again(int n) {
    MutexLock lock(mu_);
    again_ = n;
  }
  void FailWith(Status error, bool answered) {
    MutexLock lock(mu_);
    error_ = std::move(error);
    answered_ = answered;
  }
  size_t Queued() {
    MutexLock lock(mu_);
    return queue_.size();
  }
  // Lets the held slices go, after `edit` changed each (what a late answer looks like).
  void Release(const std::function<void(Slice*)>& edit = {}) {
    MutexLock lock(mu_);
    if (edit) {
      for (Slice* s : queue_) edit(s);
    }
    hold_ = false;
    cv_.NotifyAll();
  }
  int TurnedBack() {
    MutexLock lock(mu_);
    return turned_back_;
  }
  std::vector<uint64_t> SeenLocal() {
    MutexLock lock(mu_);
    return seen_local_;
  }

 private:
  void Run() {
    MutexLock lock(mu_);
    while (!stop_) {
      if (hold_ || queue_.empty()) {
        cv_.WaitUntil(mu_, std::chrono::steady_clock::now() + 1s);
        continue;
      }
      Slice* s = queue_.front();
      queue_.pop_front();
      const Status error = error_;
      s->answered = answered_;
      if (error.ok()) {
        auto* local = reinterpret_cast<unsigned char*>(s->local_addr);
        auto* remote = reinterpret_cast<unsigned char*>(s->remote_addr);
        if (s->op == OpCode::kWrite) {
          std::memcpy(remote, local, s->length);
        } else {
          std::memcpy(local, remote, s->length);
        }
      }
      mu_.Unlock();
      ctx_->CompleteSlice(s, error);
      mu_.Lock();
    }
  }

  TransportContext* const ctx_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool hold_ GUARDED_BY(mu_) = false;
  int again_ GUARDED_BY(mu_) = 0;
  int turned_back_ GUARDED_BY(mu_) = 0;
  Status error_ GUARDED_BY(mu_);
  bool answered_ GUARDED_BY(mu_) = false;
  std::deque<Slice*> queue_ GUARDED_BY(mu_);
  std::vector<uint64_t> seen_local_ GUARDED_BY(mu_);
  std::thread thread_;
};

// The engine's side: hands the copier's own slices back to it, records the originals' ends.
class Context final : public TransportContext {
 public:
  StagingCopier* copier = nullptr;

  Result<AccessPin> PinRemoteAccess(uint64_t, uint64_t, uint64_t, uint64_t,
                                    std::string_view) override {
    return UnavailableError("not used");
  }
  void CompleteSlice(Slice* slice, const Status& status) override {
    if (copier != nullptr && copier->OnTransportDone(slice, status)) return;
    MutexLock lock(mu_);
    ++ends_[slice];
    statuses_[slice] = status;
    answered_[slice] = slice->answered;
    cv_.NotifyAll();
  }
  Result<std::string> Exchange(const SegmentDesc&, std::string_view, std::string_view,
                               std::chrono::milliseconds) override {
    return UnavailableError("not used");
  }
  uint64_t incarnation() const override { return 1; }

  bool WaitEnded(size_t n) {
    MutexLock lock(mu_);
    const auto bound = std::chrono::steady_clock::now() + 10s;
    while (ends_.size() < n && std::chrono::steady_clock::now() < bound) cv_.WaitUntil(mu_, bound);
    return ends_.size() >= n;
  }
  Status StatusOf(Slice* s) {
    MutexLock lock(mu_);
    return statuses_.count(s) ? statuses_[s] : InternalError("not ended");
  }
  bool AnsweredOf(Slice* s) {
    MutexLock lock(mu_);
    return answered_[s];
  }
  int Ends(Slice* s) {
    MutexLock lock(mu_);
    return ends_.count(s) ? ends_[s] : 0;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::map<Slice*, int> ends_ GUARDED_BY(mu_);
  std::map<Slice*, Status> statuses_ GUARDED_BY(mu_);
  std::map<Slice*, bool> answered_ GUARDED_BY(mu_);
};

std::vector<unsigned char> Pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed * 7) ^ (i >> 9));
  return v;
}

uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

Slice MakeSlice(OpCode op, const void* local, const void* remote, uint64_t length) {
  Slice s;
  s.op = op;
  s.local_addr = Addr(local);
  s.remote_addr = Addr(remote);
  s.length = length;
  s.deadline = std::chrono::steady_clock::now() + 60s;
  return s;
}

constexpr uint64_t kChunk = 64 << 10;

struct Fixture {
  HostOps ops;
  Context ctx;
  StagingCopier copier;
  LoopTransport transport{&ctx};
  std::shared_ptr<PeerLink> link = std::make_shared<PeerLink>();
  explicit Fixture(StagingOptions options) : copier(ops.Make(), options, &ctx) {
    ctx.copier = &copier;
  }
};

TEST(StagingCopierTest, SlicesMoveThroughPinnedChunksNeverFromTheirOwnAddresses) {
  Fixture f({.chunk_bytes = kChunk, .max_chunks = 2, .max_copies = 8});
  constexpr size_t kSlices = 24;
  const std::vector<unsigned char> bytes = Pattern(kSlices * kChunk, 5);
  std::vector<unsigned char> device(bytes);  // the "device" buffer, local side
  std::vector<unsigned char> remote(bytes.size(), 0);
  std::vector<unsigned char> back(bytes.size(), 0);  // a second "device" buffer, for the READs
  std::vector<Slice> writes;
  for (size_t i = 0; i < kSlices; ++i) {
    writes.push_back(
        MakeSlice(OpCode::kWrite, device.data() + i * kChunk, remote.data() + i * kChunk, kChunk));
  }
  std::vector<Slice*> ptrs;
  for (Slice& s : writes) ptrs.push_back(&s);
  f.copier.Bounce(&f.transport, f.link, ptrs);
  ASSERT_TRUE(f.ctx.WaitEnded(kSlices));
  for (Slice& s : writes) EXPECT_TRUE(f.ctx.StatusOf(&s).ok()) << f.ctx.StatusOf(&s);
  EXPECT_EQ(bytes, remote);

  std::vector<Slice> reads;
  for (size_t i = 0; i < kSlices; ++i) {
    reads.push_back(
        MakeSlice(OpCode::kRead, back.data() + i * kChunk, remote.data() + i * kChunk, kChunk));
  }
  ptrs.clear();
  for (Slice& s : reads) ptrs.push_back(&s);
  f.copier.Bounce(&f.transport, f.link, ptrs);
  ASSERT_TRUE(f.ctx.WaitEnded(2 * kSlices));
  for (Slice& s : reads) EXPECT_TRUE(f.ctx.StatusOf(&s).ok()) << f.ctx.StatusOf(&s);
  EXPECT_EQ(bytes, back);

  // The transport only ever saw chunk addresses, and the pool stayed within its bound.
  for (uint64_t local : f.transport.SeenLocal()) EXPECT_TRUE(f.ops.InChunk(local, kChunk));
  EXPECT_EQ(2u * kSlices, f.transport.SeenLocal().size());
  const StagingCopier::Counters c = f.copier.counters();
  EXPECT_LE(c.chunks, 2u);
  EXPECT_EQ(2u * kSlices, c.bounced);
  EXPECT_EQ(2 * static_cast<int>(kSlices), f.ops.copies.load());  // one copy per slice
  for (Slice& s : writes) EXPECT_EQ(1, f.ctx.Ends(&s));
  for (Slice& s : reads) EXPECT_EQ(1, f.ctx.Ends(&s));
}

TEST(StagingCopierTest, AFullPoolMakesSlicesWaitInOrderUntilAChunkFrees) {
  Fixture f({.chunk_bytes = kChunk, .max_chunks = 1, .max_copies = 8});
  const std::vector<unsigned char> bytes = Pattern(2 * kChunk, 9);
  std::vector<unsigned char> remote(bytes.size(), 0);
  Slice first = MakeSlice(OpCode::kWrite, bytes.data(), remote.data(), kChunk);
  Slice second = MakeSlice(OpCode::kWrite, bytes.data() + kChunk, remote.data() + kChunk, kChunk);
  f.transport.Hold(true);
  Slice* const both[] = {&first, &second};
  f.copier.Bounce(&f.transport, f.link, both);
  // The first holds the only chunk in the transport; the second waits for it.
  ASSERT_TRUE(WaitFor([&] { return f.copier.counters().chunk_waits == 1; }, 10s));
  EXPECT_EQ(1u, f.transport.Queued());
  f.transport.Release();
  ASSERT_TRUE(f.ctx.WaitEnded(2));
  EXPECT_TRUE(f.ctx.StatusOf(&first).ok());
  EXPECT_TRUE(f.ctx.StatusOf(&second).ok());
  EXPECT_EQ(bytes, remote);
  EXPECT_EQ(1u, f.copier.counters().chunks);
}

TEST(StagingCopierTest, AReadWhoseBytesArriveAfterItsDeadlineCopiesNothingToTheDevice) {
  Fixture f({.chunk_bytes = kChunk, .max_chunks = 2, .max_copies = 8});
  std::vector<unsigned char> remote = Pattern(kChunk, 3);
  std::vector<unsigned char> device(kChunk, 0xEE);
  Slice read = MakeSlice(OpCode::kRead, device.data(), remote.data(), kChunk);
  f.transport.Hold(true);
  Slice* const one[] = {&read};
  f.copier.Bounce(&f.transport, f.link, one);
  ASSERT_TRUE(WaitFor([&] { return f.transport.Queued() == 1; }, 10s));
  // The answer comes late: the deadline the copier checks is the one it gave the transport.
  f.transport.Release([](Slice* s) { s->deadline = std::chrono::steady_clock::now() - 1ms; });
  ASSERT_TRUE(f.ctx.WaitEnded(1));
  EXPECT_EQ(StatusCode::kTimeout, f.ctx.StatusOf(&read).code()) << f.ctx.StatusOf(&read);
  EXPECT_TRUE(std::all_of(device.begin(), device.end(), [](unsigned char b) { return b == 0xEE; }));

  // A slice whose deadline passed before it got a chunk never reaches the transport.
  Slice late = MakeSlice(OpCode::kWrite, device.data(), remote.data(), kChunk);
  late.deadline = std::chrono::steady_clock::now() - 1ms;
  Slice* const again[] = {&late};
  const size_t seen = f.transport.SeenLocal().size();
  f.copier.Bounce(&f.transport, f.link, again);
  ASSERT_TRUE(f.ctx.WaitEnded(2));
  EXPECT_EQ(StatusCode::kTimeout, f.ctx.StatusOf(&late).code());
  EXPECT_EQ(seen, f.transport.SeenLocal().size());
}

TEST(StagingCopierTest, ErrorsReachTheOriginalSliceAndFreeTheChunk) {
  Fixture f({.chunk_bytes = kChunk, .max_chunks = 1, .max_copies = 8});
  const std::vector<unsigned char> bytes = Pattern(kChunk, 4);
  std::vector<unsigned char> remote(kChunk, 0);

  // The transport's answer, with Slice::answered, reaches the original.
  f.transport.FailWith(StaleError("planned against generation 1"), /*answered=*/true);
  Slice refused = MakeSlice(OpCode::kWrite, bytes.data(), remote.data(), kChunk);
  Slice* const one[] = {&refused};
  f.copier.Bounce(&f.transport, f.link, one);
  ASSERT_TRUE(f.ctx.WaitEnded(1));
  EXPECT_EQ(StatusCode::kStale, f.ctx.StatusOf(&refused).code());
  EXPECT_TRUE(f.ctx.AnsweredOf(&refused));
  f.transport.FailWith(Status::Ok(), false);

  // A failed device copy fails its slice before the transport sees it.
  f.ops.fail_copy = true;
  Slice uncopied = MakeSlice(OpCode::kWrite, bytes.data(), remote.data(), kChunk);
  Slice* const two[] = {&uncopied};
  const size_t seen = f.transport.SeenLocal().size();
  f.copier.Bounce(&f.transport, f.link, two);
  ASSERT_TRUE(f.ctx.WaitEnded(2));
  EXPECT_EQ(StatusCode::kInternal, f.ctx.StatusOf(&uncopied).code());
  EXPECT_NE(std::string::npos, f.ctx.StatusOf(&uncopied).message().find("injected copy failure"));
  EXPECT_TRUE(f.ctx.AnsweredOf(&uncopied));  // this side's failure, not the link's
  EXPECT_EQ(seen, f.transport.SeenLocal().size());
  f.ops.fail_copy = false;

  // A full transport queue is retried; a slice longer than a chunk is refused at once.
  f.transport.Again(3);
  Slice retried = MakeSlice(OpCode::kWrite, bytes.data(), remote.data(), kChunk);
  Slice oversized = MakeSlice(OpCode::kWrite, bytes.data(), remote.data(), kChunk + 1);
  Slice* const three[] = {&retried, &oversized};
  f.copier.Bounce(&f.transport, f.link, three);
  ASSERT_TRUE(f.ctx.WaitEnded(4));
  EXPECT_TRUE(f.ctx.StatusOf(&retried).ok()) << f.ctx.StatusOf(&retried);
  EXPECT_EQ(StatusCode::kInvalidArgument, f.ctx.StatusOf(&oversized).code());
  EXPECT_EQ(bytes, remote);
  EXPECT_EQ(1u, f.copier.counters().chunks);  // the one chunk came back every time
}

TEST(StagingCopierTest, WithoutPinnedMemorySlicesFailAtOnceAndALaterAllocationIsTried) {
  Fixture f({.chunk_bytes = kChunk, .max_chunks = 2, .max_copies = 8});
  f.ops.fail_allocate = true;
  const std::vector<unsigned char> bytes = Pattern(kChunk, 6);
  std::vector<unsigned char> remote(kChunk, 0);
  Slice s = MakeSlice(OpCode::kWrite, bytes.data(), remote.data(), kChunk);
  Slice* const one[] = {&s};
  f.copier.Bounce(&f.transport, f.link, one);
  ASSERT_TRUE(f.ctx.WaitEnded(1));
  // Back-pressure of this side's own, named, and marked as not the link's (no retry there).
  EXPECT_EQ(StatusCode::kAgain, f.ctx.StatusOf(&s).code());
  EXPECT_NE(std::string::npos, f.ctx.StatusOf(&s).message().find("no pinned memory"));
  EXPECT_TRUE(f.ctx.AnsweredOf(&s));
  EXPECT_TRUE(f.transport.SeenLocal().empty());

  // Not for good: once memory can be had again, a later slice gets a chunk (after the
  // allocation back-off; slices meanwhile fail at once, as above).
  f.ops.fail_allocate = false;
  std::deque<Slice> tries;
  bool moved = false;
  for (size_t ended = 1; !moved && ended < 100000; ++ended) {
    Slice& t = tries.emplace_back(MakeSlice(OpCode::kWrite, bytes.data(), remote.data(), kChunk));
    Slice* const again[] = {&t};
    f.copier.Bounce(&f.transport, f.link, again);
    ASSERT_TRUE(f.ctx.WaitEnded(ended + 1));
    moved = f.ctx.StatusOf(&t).ok();
    if (!moved) ASSERT_EQ(StatusCode::kAgain, f.ctx.StatusOf(&t).code()) << f.ctx.StatusOf(&t);
  }
  EXPECT_TRUE(moved);
  EXPECT_EQ(bytes, remote);
}

TEST(StagingCopierTest, AFullTransportQueueNeverStallsTheOtherCopies) {
  Fixture f({.chunk_bytes = kChunk, .max_chunks = 2, .max_copies = 8});
  const std::vector<unsigned char> bytes = Pattern(kChunk, 12);
  std::vector<unsigned char> remote(kChunk, 0);
  f.transport.Again(1 << 30);  // turned back until told otherwise
  Slice s = MakeSlice(OpCode::kWrite, bytes.data(), remote.data(), kChunk);
  Slice* const one[] = {&s};
  f.copier.Bounce(&f.transport, f.link, one);
  ASSERT_TRUE(WaitFor([&] { return f.transport.TurnedBack() >= 3; }, 10s));
  // Meanwhile a target copy runs on the same thread.
  std::vector<unsigned char> staging = Pattern(4096, 13), device(4096, 0);
  Mutex mu;
  CondVar cv;
  bool copied = false;
  ASSERT_TRUE(f.copier
                  .StartCopy({.dst = device.data(),
                              .src = staging.data(),
                              .length = 4096,
                              .done =
                                  [&](const Status& st) {
                                    EXPECT_TRUE(st.ok()) << st;
                                    MutexLock lock(mu);
                                    copied = true;
                                    cv.NotifyAll();
                                  }})
                  .ok());
  {
    MutexLock lock(mu);
    const auto bound = std::chrono::steady_clock::now() + 10s;
    while (!copied && std::chrono::steady_clock::now() < bound) cv.WaitUntil(mu, bound);
    EXPECT_TRUE(copied) << "the target copy waited behind a turned-back slice";
  }
  EXPECT_EQ(staging, device);
  EXPECT_EQ(0, f.ctx.Ends(&s));
  // The queue frees: the slice goes, its bytes copied from the device once (not per retry).
  const int copies = f.ops.copies.load();
  f.transport.Again(0);
  ASSERT_TRUE(f.ctx.WaitEnded(1));
  EXPECT_TRUE(f.ctx.StatusOf(&s).ok()) << f.ctx.StatusOf(&s);
  EXPECT_EQ(bytes, remote);
  EXPECT_EQ(copies, f.ops.copies.load());
}

TEST(StagingCopierTest, ACanceledSliceWaitingForAChunkIsNeverHandedOver) {
  std::atomic<const Slice*> canceled{nullptr};
  Fixture f(
      {.chunk_bytes = kChunk, .max_chunks = 1, .max_copies = 8, .canceled = [&](const Slice* s) {
         return s == canceled.load();
       }});
  const std::vector<unsigned char> bytes = Pattern(2 * kChunk, 15);
  std::vector<unsigned char> remote(bytes.size(), 0);
  Slice held = MakeSlice(OpCode::kWrite, bytes.data(), remote.data(), kChunk);
  Slice dropped = MakeSlice(OpCode::kWrite, bytes.data() + kChunk, remote.data() + kChunk, kChunk);
  f.transport.Hold(true);
  Slice* const both[] = {&held, &dropped};
  f.copier.Bounce(&f.transport, f.link, both);
  ASSERT_TRUE(WaitFor([&] { return f.copier.counters().chunk_waits == 1; }, 10s));
  canceled = &dropped;  // its batch is canceled while it waits
  f.transport.Release();
  ASSERT_TRUE(f.ctx.WaitEnded(2));
  EXPECT_TRUE(f.ctx.StatusOf(&held).ok());
  EXPECT_EQ(StatusCode::kCanceled, f.ctx.StatusOf(&dropped).code());
  EXPECT_EQ(1u, f.transport.SeenLocal().size());
  EXPECT_TRUE(
      std::all_of(remote.begin() + kChunk, remote.end(), [](unsigned char b) { return b == 0; }));
}

TEST(StagingCopierTest, ASliceBehindTheHeadTimesOutAtItsOwnDeadline) {
  Fixture f({.chunk_bytes = kChunk, .max_chunks = 1, .max_copies = 8});
  const std::vector<unsigned char> bytes = Pattern(3 * kChunk, 14);
  std::vector<unsigned char> remote(bytes.size(), 0);
  Slice held = MakeSlice(OpCode::kWrite, bytes.data(), remote.data(), kChunk);
  Slice head = MakeSlice(OpCode::kWrite, bytes.data() + kChunk, remote.data() + kChunk, kChunk);
  Slice late =
      MakeSlice(OpCode::kWrite, bytes.data() + 2 * kChunk, remote.data() + 2 * kChunk, kChunk);
  late.deadline = std::chrono::steady_clock::now() - 1ms;
  f.transport.Hold(true);
  Slice* const three[] = {&held, &head, &late};
  f.copier.Bounce(&f.transport, f.link, three);
  // `held` keeps the only chunk, `head` waits for it; `late`, behind, ends at its deadline.
  ASSERT_TRUE(f.ctx.WaitEnded(1));
  EXPECT_EQ(StatusCode::kTimeout, f.ctx.StatusOf(&late).code()) << f.ctx.StatusOf(&late);
  EXPECT_EQ(0, f.ctx.Ends(&head));
  f.transport.Release();
  ASSERT_TRUE(f.ctx.WaitEnded(3));
  EXPECT_TRUE(f.ctx.StatusOf(&held).ok());
  EXPECT_TRUE(f.ctx.StatusOf(&head).ok());
  EXPECT_TRUE(std::all_of(remote.begin() + 2 * kChunk, remote.end(),
                          [](unsigned char b) { return b == 0; }));
}

TEST(StagingCopierTest, TargetCopiesHoldThePinUntilTheyEndAndKeepTheirBounds) {
  Fixture f({.chunk_bytes = kChunk, .max_chunks = 1, .max_copies = 1});
  std::vector<unsigned char> staging = Pattern(4096, 8);
  std::vector<unsigned char> device(4096, 0);
  std::atomic<int> released{0};
  auto pin = [&] {
    return AccessPin(
        [](void* owner, void*) { static_cast<std::atomic<int>*>(owner)->fetch_add(1); }, &released,
        nullptr);
  };
  Mutex mu;
  CondVar cv;
  std::vector<std::pair<Status, int>> ends;  // each done's status, and pins released by then
  auto done = [&](const Status& s) {
    MutexLock lock(mu);
    ends.emplace_back(s, released.load());
    cv.NotifyAll();
  };
  auto wait_ends = [&](size_t n) {
    MutexLock lock(mu);
    const auto bound = std::chrono::steady_clock::now() + 10s;
    while (ends.size() < n && std::chrono::steady_clock::now() < bound) cv.WaitUntil(mu, bound);
    return ends.size() >= n;
  };
  StagingCopier::Copy write{.dst = device.data(),
                            .src = staging.data(),
                            .length = staging.size(),
                            .pin = pin(),
                            .done = done};
  ASSERT_TRUE(f.copier.StartCopy(std::move(write)).ok());
  ASSERT_TRUE(wait_ends(1));
  EXPECT_TRUE(ends[0].first.ok());
  EXPECT_EQ(1, ends[0].second);  // the pin went before `done` ran
  EXPECT_EQ(staging, device);

  // Past its deadline: nothing copied, Timeout.
  std::vector<unsigned char> untouched(4096, 0x11);
  StagingCopier::Copy late{.dst = untouched.data(),
                           .src = staging.data(),
                           .length = staging.size(),
                           .deadline = std::chrono::steady_clock::now() - 1ms,
                           .pin = pin(),
                           .done = done};
  ASSERT_TRUE(f.copier.StartCopy(std::move(late)).ok());
  ASSERT_TRUE(wait_ends(2));
  EXPECT_EQ(StatusCode::kTimeout, ends[1].first.code());
  EXPECT_EQ(2, released.load());
  EXPECT_TRUE(
      std::all_of(untouched.begin(), untouched.end(), [](unsigned char b) { return b == 0x11; }));

  // Beyond max_copies queued (the copier's thread busy with one): Again, nothing queued.
  f.ops.Hold();
  std::vector<unsigned char> a(4096, 0), b(4096, 0);
  ASSERT_TRUE(
      f.copier
          .StartCopy(
              {.dst = a.data(), .src = staging.data(), .length = 4096, .pin = pin(), .done = done})
          .ok());
  ASSERT_TRUE(f.ops.WaitHeldCopy());  // taken off the queue: the thread is in it
  ASSERT_TRUE(
      f.copier
          .StartCopy(
              {.dst = b.data(), .src = staging.data(), .length = 4096, .pin = pin(), .done = done})
          .ok());
  EXPECT_EQ(
      StatusCode::kAgain,
      f.copier
          .StartCopy(
              {.dst = b.data(), .src = staging.data(), .length = 4096, .pin = pin(), .done = done})
          .code());
  f.ops.Let();
  ASSERT_TRUE(wait_ends(4));
  EXPECT_EQ(staging, a);
  EXPECT_EQ(staging, b);
  EXPECT_EQ(5, released.load());  // four copies' pins and the refused one's

  // Stopped: refused, and `done` never runs for a refusal.
  f.copier.Stop();
  StagingCopier::Copy refused{.dst = device.data(),
                              .src = staging.data(),
                              .length = staging.size(),
                              .pin = pin(),
                              .done = done};
  EXPECT_EQ(StatusCode::kCanceled, f.copier.StartCopy(std::move(refused)).code());
  EXPECT_EQ(6, released.load());  // the refused copy's pin went with it
  MutexLock lock(mu);
  EXPECT_EQ(4u, ends.size());
}

TEST(StagingCopierTest, StopCancelsWhatWaitsAndFreesItsChunksAfterward) {
  auto f = std::make_unique<Fixture>(
      StagingOptions{.chunk_bytes = kChunk, .max_chunks = 1, .max_copies = 8});
  const std::vector<unsigned char> bytes = Pattern(2 * kChunk, 2);
  std::vector<unsigned char> remote(bytes.size(), 0);
  Slice held = MakeSlice(OpCode::kWrite, bytes.data(), remote.data(), kChunk);
  Slice waiting = MakeSlice(OpCode::kWrite, bytes.data() + kChunk, remote.data() + kChunk, kChunk);
  f->transport.Hold(true);
  Slice* const both[] = {&held, &waiting};
  f->copier.Bounce(&f->transport, f->link, both);
  ASSERT_TRUE(WaitFor([&] { return f->copier.counters().chunk_waits == 1; }, 10s));
  f->copier.Stop();
  ASSERT_TRUE(f->ctx.WaitEnded(1));
  EXPECT_EQ(StatusCode::kCanceled, f->ctx.StatusOf(&waiting).code());
  // The held slice still completes when its transport lets it go, exactly once.
  f->transport.Release();
  ASSERT_TRUE(f->ctx.WaitEnded(2));
  EXPECT_TRUE(f->ctx.StatusOf(&held).ok());
  EXPECT_EQ(1, f->ctx.Ends(&held));
  // A bounce after Stop is canceled at once.
  Slice after = MakeSlice(OpCode::kWrite, bytes.data(), remote.data(), kChunk);
  Slice* const one[] = {&after};
  f->copier.Bounce(&f->transport, f->link, one);
  EXPECT_EQ(StatusCode::kCanceled, f->ctx.StatusOf(&after).code());
  // The chunk is freed with the copier, not before (a transport may hold it until stopped).
  std::atomic<int> freed{0};
  f->ops.freed = &freed;
  EXPECT_EQ(0, freed.load());
  f.reset();
  EXPECT_EQ(1, freed.load());
}

}  // namespace
}  // namespace ferry::engine
