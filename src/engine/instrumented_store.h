// InstrumentedStore: a MetadataStore decorator that counts every call of the store it wraps
// (by kind: count, errors, NotFound answers, latency) into the engine's counters, and otherwise
// forwards each call unchanged. Lease refreshes and watches the wrapped client runs by itself
// are its own and not counted.
//
// Thread contract: thread-safe, as the wrapped store.
#pragma once

#include <memory>

#include "engine/engine_metrics.h"
#include "metadata/metadata_store.h"

namespace ferry::engine {

class InstrumentedStore final : public MetadataStore {
 public:
  // Owns `inner`; `counters` is borrowed for this object's life.
  InstrumentedStore(std::unique_ptr<MetadataStore> inner, EngineCounters* counters)
      : inner_(std::move(inner)), counters_(counters) {}

  std::string_view scheme() const override { return inner_->scheme(); }
  Result<std::string> Get(std::string_view key) override;
  Status Put(std::string_view key, std::string_view value, const PutOptions& options) override;
  using MetadataStore::Put;
  Status Delete(std::string_view key) override;
  Status DeleteIf(std::string_view key, std::string_view expected) override;
  Result<std::vector<KeyValue>> List(std::string_view prefix) override;
  Watcher* watcher() override { return inner_->watcher(); }
  bool TakenOver(std::string_view key) const override { return inner_->TakenOver(key); }
  void Abandon() override { inner_->Abandon(); }

 private:
  std::unique_ptr<MetadataStore> inner_;
  EngineCounters* const counters_;
};

}  // namespace ferry::engine
