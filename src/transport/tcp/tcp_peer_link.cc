#include "transport/tcp/tcp_peer_link.h"

#include <limits>
#include <utility>

#include "transport/tcp/tcp_protocol.h"
#include "transport/tcp/tcp_runtime.h"

namespace ferry::tcp {
namespace {

Status CheckSlice(const Slice* slice) {
  if (slice == nullptr) return InvalidArgumentError("tcp: null slice");
  if (slice->op != OpCode::kRead && slice->op != OpCode::kWrite) {
    return InvalidArgumentError("tcp: unknown op " + std::to_string(static_cast<int>(slice->op)));
  }
  if (slice->length > kMaxPayloadBytes) {
    return InvalidArgumentError("tcp: slice length " + std::to_string(slice->length) + " over " +
                                std::to_string(kMaxPayloadBytes));
  }
  return Status::Ok();
}

}  // namespace

TcpPeerLink::TcpPeerLink(std::shared_ptr<TcpRuntime> runtime, SocketAddress address,
                         std::string peer_name)
    : runtime_(std::move(runtime)),
      address_(address),
      peer_name_(std::move(peer_name)),
      budget_(std::make_shared<LinkBudget>(runtime_->options.max_queued_per_peer)),
      slots_(runtime_->options.connections_per_peer) {}

TcpPeerLink::~TcpPeerLink() {
  MutexLock lock(mu_);
  const Status why = CanceledError("tcp link to " + peer_name_ + " dropped");
  for (auto& connection : slots_) {
    if (connection) connection->Release(why);
  }
}

Status TcpPeerLink::Submit(std::span<Slice* const> slices) {
  if (runtime_->stopped.load(std::memory_order_acquire)) {
    return CanceledError("tcp transport stopped");
  }
  for (const Slice* slice : slices) RETURN_IF_ERROR(CheckSlice(slice));
  // Zero bytes touch nothing: such slices complete at once, without a round trip.
  std::vector<Slice*> empty;
  std::vector<Slice*> moving;
  for (Slice* slice : slices) (slice->length == 0 ? empty : moving).push_back(slice);
  if (!empty.empty()) {
    RETURN_IF_ERROR(SubmitMoving(moving));
    for (Slice* slice : empty) runtime_->ctx->CompleteSlice(slice, Status::Ok());
    return Status::Ok();
  }
  return SubmitMoving(slices);
}

Status TcpPeerLink::SubmitMoving(std::span<Slice* const> slices) {
  if (slices.empty()) return Status::Ok();
  if (slices.size() > budget_->capacity()) {
    return InvalidArgumentError("tcp: " + std::to_string(slices.size()) +
                                " slices exceed the per-peer queue of " +
                                std::to_string(budget_->capacity()));
  }
  if (!budget_->TryReserve(slices.size())) {
    return AgainError("tcp queue to " + peer_name_ + " is full");
  }
  std::vector<Slice*> orphans;  // could not be queued: stopping, or every try closed at once
  Status last_close;             // why the last connection that refused them closed
  {
    MutexLock lock(mu_);
    std::vector<std::vector<Slice*>> groups = SpreadLocked(slices);
    for (size_t slot = 0; slot < groups.size(); ++slot) {
      if (groups[slot].empty()) continue;
      bool queued = false;
      for (int attempt = 0; attempt < 2 && !queued; ++attempt) {
        std::shared_ptr<InitiatorConnection> connection = ConnectionLocked(slot);
        if (!connection) break;
        queued = connection->Enqueue(groups[slot]);
        if (!queued) last_close = connection->close_reason();
      }
      if (!queued) orphans.insert(orphans.end(), groups[slot].begin(), groups[slot].end());
    }
  }
  if (!orphans.empty()) {
    budget_->Release(orphans.size());
    // A connection can fail before the slices reach it (a denied handshake, a refused connect):
    // they fail with its reason, as they would have on it; a bare "keep closing" only when it
    // gave none worth keeping (idle close, release).
    const std::string closing = "tcp connections to " + peer_name_ + " keep closing";
    Status why = UnavailableError(closing);
    if (runtime_->stopped.load(std::memory_order_acquire)) {
      why = CanceledError("tcp transport stopped");
    } else if (!last_close.ok() && last_close.code() != StatusCode::kCanceled) {
      why = Status(last_close.code(), closing + ": " + last_close.message());
    }
    for (Slice* slice : orphans) runtime_->ctx->CompleteSlice(slice, why);
  }
  return Status::Ok();
}

std::vector<std::vector<Slice*>> TcpPeerLink::SpreadLocked(std::span<Slice* const> slices) {
  const size_t n = slots_.size();
  std::vector<size_t> load(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (slots_[i] && !slots_[i]->closed()) load[i] = slots_[i]->load();
  }
  std::vector<std::vector<Slice*>> groups(n);
  const uint64_t run_bytes = runtime_->options.stripe_size;
  size_t best = 0;
  uint64_t run = run_bytes;  // bytes in the current run; full: the next slice starts a run
  for (Slice* slice : slices) {
    if (run >= run_bytes) {
      best = next_slot_ % n;
      for (size_t k = 1; k < n; ++k) {
        const size_t i = (next_slot_ + k) % n;
        if (load[i] < load[best]) best = i;
      }
      next_slot_ = (best + 1) % n;
      run = 0;
    }
    ++load[best];
    run += slice->length;
    groups[best].push_back(slice);
  }
  return groups;
}

std::shared_ptr<InitiatorConnection> TcpPeerLink::ConnectionLocked(size_t slot) {
  std::shared_ptr<InitiatorConnection>& connection = slots_[slot];
  if (connection && !connection->closed()) return connection;
  if (runtime_->stopped.load(std::memory_order_acquire)) return nullptr;
  auto fresh = std::make_shared<InitiatorConnection>(runtime_, runtime_->PickLoop(), address_,
                                                     peer_name_, budget_);
  if (!fresh->Start()) return nullptr;
  connection = std::move(fresh);
  return connection;
}

}  // namespace ferry::tcp
