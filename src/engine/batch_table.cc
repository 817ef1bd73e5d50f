#include "engine/batch_table.h"

#include <string>

namespace ferry::engine {

Result<BatchId> BatchTable::Allocate(size_t capacity) {
  if (capacity == 0) return InvalidArgumentError("a batch needs room for at least one task");
  auto batch = std::make_shared<Batch>();
  batch->capacity = capacity;
  MutexLock lock(mu_);
  batch->id = next_++;
  const BatchId id = batch->id;
  batches_.emplace(id, std::move(batch));
  return id;
}

Result<std::shared_ptr<Batch>> BatchTable::Find(BatchId id) const {
  MutexLock lock(mu_);
  auto it = batches_.find(id);
  if (it == batches_.end()) return NotFoundError("no batch " + std::to_string(id));
  return it->second;
}

Status BatchTable::Free(BatchId id, const std::function<void(Batch&)>& on_freed) {
  std::shared_ptr<Batch> gone;  // released after the lock
  MutexLock lock(mu_);
  auto it = batches_.find(id);
  if (it == batches_.end()) return NotFoundError("no batch " + std::to_string(id));
  Batch& batch = *it->second;
  if (!batch.done()) {
    const size_t open = batch.submitted.load() - batch.completed.load() - batch.failed.load();
    return BusyError("batch " + std::to_string(id) + " still has " + std::to_string(open) +
                     " transfers in flight");
  }
  if (on_freed) on_freed(batch);
  gone = std::move(it->second);
  batches_.erase(it);
  return Status::Ok();
}

std::map<BatchId, std::shared_ptr<Batch>> BatchTable::TakeAll() {
  MutexLock lock(mu_);
  std::map<BatchId, std::shared_ptr<Batch>> out;
  out.swap(batches_);
  return out;
}

size_t BatchTable::size() const {
  MutexLock lock(mu_);
  return batches_.size();
}

}  // namespace ferry::engine
