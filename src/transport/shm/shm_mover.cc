#include "transport/shm/shm_mover.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <vector>

#include "common/log.h"
#include "transport/shm/shm_cma.h"
#include "transport/shm/shm_encoding.h"

namespace ferry::shm {
namespace {

// One slice's way through the batch.
struct Item {
  Slice* slice = nullptr;
  Status status;                           // the final result once decided
  bool decided = false;                    // status is final (failed, or copied)
  BufferKey key;                           // parsed remote key
  uint64_t buffer_offset = 0;              // mapped: where the range starts in the buffer
  std::shared_ptr<RemoteMapping> mapping;  // mapped and mappable
};

class Batch {
 public:
  Batch(const MoveEnv& env, ShmPeer& peer, size_t worker)
      : env_(env), peer_(peer), worker_(worker) {}

  void Run(std::span<Slice* const> slices) {
    items_.resize(slices.size());
    for (size_t i = 0; i < slices.size(); ++i) Parse(slices[i], &items_[i]);
    if (std::any_of(items_.begin(), items_.end(), [](const Item& it) { return !it.decided; })) {
      MoveGranted();
    }
    Complete();
  }

 private:
  void Decide(Item* item, Status status) {
    item->status = std::move(status);
    item->decided = true;
  }

  void Parse(Slice* slice, Item* item) {
    item->slice = slice;
    if (slice->length == 0) return Decide(item, Status::Ok());  // nothing to pin or move
    Result<BufferKey> key = DecodeBufferKey(slice->remote_key);
    if (!key.ok()) return Decide(item, key.status().WithContext("shm peer " + peer_.name()));
    item->key = *key;
    if (item->key.mapped) {
      Result<uint64_t> offset = item->key.OffsetOf(slice->remote_addr, slice->length);
      if (!offset.ok()) return Decide(item, offset.status());
      item->buffer_offset = *offset;
    }
  }

  // Undecided items in order, and their ranges.
  std::vector<Item*> Pending() {
    std::vector<Item*> out;
    for (Item& it : items_) {
      if (!it.decided) out.push_back(&it);
    }
    return out;
  }

  void FailAll(const std::vector<Item*>& items, const Status& why) {
    for (Item* it : items) {
      if (!it->decided) Decide(it, why);
    }
  }

  void MoveGranted() {
    std::vector<Item*> pending = Pending();
    Result<samehost::GrantConnection*> conn = peer_.Connection(worker_);
    if (!conn.ok()) return FailAll(pending, conn.status());
    std::vector<samehost::RangeRequest> ranges;
    ranges.reserve(pending.size());
    for (Item* it : pending) {
      ranges.push_back({it->slice->remote_addr, it->slice->length, it->slice->peer_incarnation,
                        it->slice->remote_generation});
    }
    std::vector<Status> answers;
    env_.counters->grant_round_trips.fetch_add(1, std::memory_order_relaxed);
    const Status round_trip = (*conn)->Acquire(ranges, &answers, env_.timeout);
    if (!round_trip.ok()) {
      if ((*conn)->broken()) peer_.DropConnection(worker_);
      return FailAll(pending, round_trip.WithContext("shm peer " + peer_.name()));
    }
    std::vector<Item*> granted;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (answers[i].ok()) {
        granted.push_back(pending[i]);
      } else {
        Refused(pending[i], answers[i]);
      }
    }
    if (!granted.empty()) {
      ResolveMappings(granted, *conn);
      if ((*conn)->broken()) {
        // The target dropped the pins with the connection: copying now would be unguarded.
        peer_.DropConnection(worker_);
        return FailAll(granted, UnavailableError("shm peer " + peer_.name() +
                                                 ": grant connection broke before the copy"));
      }
      Copy(granted);
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    if (!(*conn)->Release().ok()) peer_.DropConnection(worker_);  // the target releases them
  }

  void Refused(Item* item, const Status& answer) {
    const StatusCode code = answer.code();
    if (item->key.mapped && (code == StatusCode::kStale || code == StatusCode::kNotFound) &&
        peer_.DropMapping(item->slice->peer_incarnation, item->key.buffer_id)) {
      env_.counters->mappings_dropped.fetch_add(1, std::memory_order_relaxed);
    }
    Decide(item, answer.WithContext("shm peer " + peer_.name() + " refused access"));
  }

  // Finds (or fetches) the mapping of each granted mapped item; items whose buffer cannot be
  // mapped are copied with CMA instead.
  void ResolveMappings(const std::vector<Item*>& granted, samehost::GrantConnection* conn) {
    for (Item* it : granted) {
      if (!it->key.mapped || conn->broken()) continue;
      bool fetched = false;
      Result<std::shared_ptr<RemoteMapping>> mapping = peer_.Mapping(
          it->slice->peer_incarnation, it->key.buffer_id, it->key.buffer_length, conn, &fetched);
      if (fetched) env_.counters->fd_fetches.fetch_add(1, std::memory_order_relaxed);
      if (mapping.ok()) {
        it->mapping = std::move(mapping).value();
      } else {
        FERRY_LOG(kDebug) << mapping.status() << "; copying with process_vm_* instead";
      }
    }
  }

  void Copy(const std::vector<Item*>& granted) {
    std::vector<CmaCopy> copies[2];  // indexed by OpCode
    std::vector<Item*> owners[2];
    for (Item* it : granted) {
      Slice* s = it->slice;
      if (it->mapping != nullptr) {
        uint8_t* remote = it->mapping->base() + it->buffer_offset;
        auto* local = reinterpret_cast<uint8_t*>(s->local_addr);
        if (s->op == OpCode::kWrite) {
          std::memcpy(remote, local, s->length);
        } else {
          std::memcpy(local, remote, s->length);
        }
        env_.counters->mapped_slices.fetch_add(1, std::memory_order_relaxed);
        Decide(it, Status::Ok());
        continue;
      }
      const auto op = static_cast<size_t>(s->op);
      copies[op].push_back({s->local_addr, s->remote_addr, s->length});
      owners[op].push_back(it);
    }
    for (OpCode op : {OpCode::kWrite, OpCode::kRead}) {
      const auto o = static_cast<size_t>(op);
      if (copies[o].empty()) continue;
      std::vector<Status> results = CmaTransfer(peer_.address().pid, op, copies[o]);
      for (size_t i = 0; i < results.size(); ++i) {
        if (results[i].ok()) env_.counters->cma_slices.fetch_add(1, std::memory_order_relaxed);
        Decide(owners[o][i], std::move(results[i]));
      }
    }
  }

  void Complete() {
    for (Item& it : items_) {
      if (!it.status.ok()) env_.counters->failed_slices.fetch_add(1, std::memory_order_relaxed);
      env_.ctx->CompleteSlice(it.slice, it.status);
    }
  }

  const MoveEnv& env_;
  ShmPeer& peer_;
  const size_t worker_;
  std::vector<Item> items_;
};

}  // namespace

void MoveBatch(const MoveEnv& env, ShmPeer& peer, size_t worker, std::span<Slice* const> slices) {
  Batch batch(env, peer, worker);
  batch.Run(slices);
}

}  // namespace ferry::shm
