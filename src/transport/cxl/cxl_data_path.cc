// The cxl data path: the work queue, and moving a batch (plan, Acquire, copy, fence, Release,
// complete).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "transport/cxl/cxl_peer_link.h"
#include "transport/cxl/cxl_runtime.h"
#include "transport/cxl/cxl_wire.h"

namespace ferry::cxl {
namespace {

// How long an idle worker sleeps before re-checking for Stop (a wake-up comes sooner with work).
constexpr auto kIdleTick = std::chrono::milliseconds(100);

// A slice whose addresses checked out: its remote bytes are at `remote_offset` in the window.
struct Planned {
  Slice* slice = nullptr;
  uint64_t remote_offset = 0;
};

std::string RangeText(uint64_t addr, uint64_t length) {
  return "[" + std::to_string(addr) + ", +" + std::to_string(length) + ")";
}

// The window offset of `s`'s remote bytes, after checking what the initiator can check: the
// local range lies in our mapping, the key decodes, and the remote range lies in the key's
// region of the peer's window. The target's pin is the authoritative check; this one keeps a
// bad plan from ever touching bytes outside the buffer it names.
Result<uint64_t> PlanSlice(const CxlWindow& window, const Endpoint& peer, const Slice& s) {
  if (!window.Contains(s.local_addr, s.length)) {
    return InvalidArgumentError("cxl: local range " + RangeText(s.local_addr, s.length) +
                                " is not inside this engine's mapping of the window");
  }
  Result<RegionKey> key = DecodeKey(s.remote_key);
  if (!key.ok()) return key.status();
  if (key->offset > peer.window.size || key->length > peer.window.size - key->offset) {
    return InvalidArgumentError("cxl key " + RangeText(key->offset, key->length) +
                                " leaves the window");
  }
  const uint64_t region = peer.base + key->offset;  // no wrap: DecodeEndpoint checked base+size
  if (s.remote_addr < region || s.remote_addr - region > key->length ||
      s.length > key->length - (s.remote_addr - region)) {
    return InvalidArgumentError("cxl: remote range " + RangeText(s.remote_addr, s.length) +
                                " leaves its buffer " + RangeText(region, key->length));
  }
  return s.remote_addr - peer.base;
}

// Orders the copy's loads after the grant: the target's stores before it granted are visible.
// For a window that is not cache-coherent across its users (some pooled CXL memory), this is
// where the source lines would be invalidated (clflushopt each 64-byte line, then a fence).
void FenceBeforeCopy() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// Makes the copy's stores visible to every mapper of the window before the pins go and the
// slices complete. memcpy/memmove use non-temporal stores for large copies, which only an
// sfence orders. For a non-coherent window, this is where each destination line would be
// written back (clwb per 64-byte line) before the sfence.
void FenceAfterCopy() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
#if defined(__x86_64__) || defined(__i386__)
  _mm_sfence();
#endif
}

void Copy(const CxlWindow& window, const Planned& p) {
  const Slice& s = *p.slice;
  uint8_t* remote = window.base() + p.remote_offset;
  auto* local = reinterpret_cast<uint8_t*>(s.local_addr);  // NOLINT: a planned window address
  // memmove: both ends are in one window, so they may overlap.
  if (s.op == OpCode::kWrite) {
    std::memmove(remote, local, s.length);
  } else {
    std::memmove(local, remote, s.length);
  }
}

void CompleteAll(CxlRuntime& rt, std::span<const Planned> part, const Status& status) {
  for (const Planned& p : part) rt.ctx->CompleteSlice(p.slice, status);
}

// Pins `ranges` on the link's peer: on an idle connection when there is one, else (or when
// that one turns out dead: its server went away since) on a new one. On return *connection
// holds the connection used, if any; *granted is filled when the round trip succeeded.
Status AcquireRanges(CxlPeerLink& link, std::span<const samehost::RangeRequest> ranges,
                     std::chrono::milliseconds timeout,
                     std::unique_ptr<samehost::GrantConnection>* connection,
                     std::vector<Status>* granted) {
  *connection = link.TakeIdleConnection();
  if (*connection != nullptr) {
    const Status s = (*connection)->Acquire(ranges, granted, timeout);
    if (s.code() != StatusCode::kUnavailable || !(*connection)->broken()) return s;
  }
  Result<std::unique_ptr<samehost::GrantConnection>> fresh = link.OpenConnection(timeout);
  if (!fresh.ok()) return fresh.status();
  *connection = std::move(fresh).value();
  return (*connection)->Acquire(ranges, granted, timeout);
}

// One Acquire for `part`, the copies it granted, one Release; then every slice completes.
void MoveChunk(CxlRuntime& rt, CxlPeerLink& link, std::span<const Planned> part) {
  std::vector<samehost::RangeRequest> ranges;
  ranges.reserve(part.size());
  for (const Planned& p : part) {
    const Slice& s = *p.slice;
    ranges.push_back({s.remote_addr, s.length, s.peer_incarnation, s.remote_generation});
  }
  std::unique_ptr<samehost::GrantConnection> connection;
  std::vector<Status> granted;
  Status acquired = AcquireRanges(link, ranges, rt.options.io_timeout, &connection, &granted);
  if (acquired.ok() && granted.size() != part.size()) {
    acquired = InternalError("cxl grant reply has " + std::to_string(granted.size()) +
                             " answers for " + std::to_string(part.size()) + " ranges");
  }
  if (!acquired.ok()) {
    // A connection is dropped (broken, or out of step): the target releases its pins.
    return CompleteAll(rt, part, acquired.WithContext(link.peer_name() + " cxl acquire"));
  }
  FenceBeforeCopy();
  for (size_t i = 0; i < part.size(); ++i) {
    if (granted[i].ok()) Copy(*rt.window->window, part[i]);
  }
  FenceAfterCopy();
  // A failed Release means the connection broke; the target released the pins itself then,
  // after the bytes had moved, so the slices still succeeded.
  connection->Release().IgnoreError();
  link.ReturnConnection(std::move(connection));
  for (size_t i = 0; i < part.size(); ++i) {
    rt.ctx->CompleteSlice(
        part[i].slice, granted[i].ok() ? Status::Ok() : granted[i].WithContext(link.peer_name()));
  }
}

}  // namespace

Status Enqueue(CxlRuntime& rt, Batch batch) {
  const size_t n = batch.slices.size();
  {
    MutexLock lock(rt.mu);
    if (rt.stopping) return CanceledError("cxl transport stopped");
    if (n > rt.options.max_queued_slices - rt.queued_slices) {
      return AgainError("cxl queue full (" + std::to_string(rt.queued_slices) + " of " +
                        std::to_string(rt.options.max_queued_slices) + " slices queued)");
    }
    rt.queued_slices += n;
    rt.queue.push_back(std::move(batch));
  }
  rt.work_cv.NotifyOne();
  return Status::Ok();
}

void RunWorker(CxlRuntime* rt) {
  for (;;) {
    Batch batch;
    {
      MutexLock lock(rt->mu);
      while (rt->queue.empty() && !rt->stopping) {
        rt->work_cv.WaitUntil(rt->mu, std::chrono::steady_clock::now() + kIdleTick);
      }
      if (rt->stopping) return;  // Stop completes what is still queued
      batch = std::move(rt->queue.front());
      rt->queue.pop_front();
      rt->queued_slices -= batch.slices.size();
    }
    MoveBatch(*rt, batch);
  }
}

void MoveBatch(CxlRuntime& rt, Batch& batch) {
  const CxlWindow& window = *rt.window->window;
  const Endpoint& peer = batch.link->peer();
  std::vector<Planned> planned;
  planned.reserve(batch.slices.size());
  for (Slice* s : batch.slices) {
    if (s->length == 0) {  // moves nothing, so needs no grant
      rt.ctx->CompleteSlice(s, Status::Ok());
      continue;
    }
    Result<uint64_t> offset = PlanSlice(window, peer, *s);
    if (!offset.ok()) {
      rt.ctx->CompleteSlice(s, offset.status());
      continue;
    }
    planned.push_back({s, *offset});
  }
  for (size_t i = 0; i < planned.size(); i += kMaxRangesPerAcquire) {
    const std::span<const Planned> part(planned.data() + i,
                                        std::min(kMaxRangesPerAcquire, planned.size() - i));
    if (rt.stop_requested.load(std::memory_order_acquire)) {
      CompleteAll(rt, part, CanceledError("cxl transport stopped"));
    } else {
      MoveChunk(rt, *batch.link, part);
    }
  }
}

}  // namespace ferry::cxl
