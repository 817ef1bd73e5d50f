// BatchTable: the engine's batches by id. Lookups hand out shared ownership, so a status call
// racing freeBatchID reads a batch that stays alive for as long as it looks; Free never waits.
//
// Thread contract: thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>

#include "common/mutex.h"
#include "engine/batch.h"
#include "ferry/status.h"

namespace ferry::engine {

class BatchTable {
 public:
  // A new empty batch for up to `capacity` tasks. InvalidArgument for 0.
  Result<BatchId> Allocate(size_t capacity);
  // NotFound for an unknown (or freed) id.
  Result<std::shared_ptr<Batch>> Find(BatchId id) const;
  // Removes a batch whose every task has ended; Busy (changing nothing) while one is still
  // WAITING or PENDING. The batch's memory goes once no transport or worker holds it; nothing
  // of its ended tasks lands afterwards. `on_freed` runs with the batch before it leaves.
  Status Free(BatchId id, const std::function<void(Batch&)>& on_freed);
  // Removes every batch (engine shutdown); returns them so the caller decides when they go.
  std::map<BatchId, std::shared_ptr<Batch>> TakeAll();
  size_t size() const;

 private:
  mutable Mutex mu_;
  std::map<BatchId, std::shared_ptr<Batch>> batches_ GUARDED_BY(mu_);
  BatchId next_ GUARDED_BY(mu_) = 1;
};

}  // namespace ferry::engine
