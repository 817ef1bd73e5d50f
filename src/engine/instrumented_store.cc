#include "engine/instrumented_store.h"

#include <chrono>

namespace ferry::engine {

namespace {

// Times `call` and counts its outcome as `op`.
template <typename Call>
auto Counted(EngineCounters* counters, StoreOp op, Call&& call) {
  const auto start = std::chrono::steady_clock::now();
  auto result = call();
  const StatusCode code = result.ok() ? StatusCode::kOk : status_internal::AsStatus(result).code();
  counters->store_op(op).Record(code, std::chrono::steady_clock::now() - start);
  return result;
}

}  // namespace

Result<std::string> InstrumentedStore::Get(std::string_view key) {
  return Counted(counters_, StoreOp::kGet, [&] { return inner_->Get(key); });
}

Status InstrumentedStore::Put(std::string_view key, std::string_view value,
                              const PutOptions& options) {
  return Counted(counters_, StoreOp::kPut, [&] { return inner_->Put(key, value, options); });
}

Status InstrumentedStore::Delete(std::string_view key) {
  return Counted(counters_, StoreOp::kDelete, [&] { return inner_->Delete(key); });
}

Status InstrumentedStore::DeleteIf(std::string_view key, std::string_view expected) {
  return Counted(counters_, StoreOp::kDeleteIf, [&] { return inner_->DeleteIf(key, expected); });
}

Result<std::vector<KeyValue>> InstrumentedStore::List(std::string_view prefix) {
  return Counted(counters_, StoreOp::kList, [&] { return inner_->List(prefix); });
}

}  // namespace ferry::engine
