// The RPC handlers a TransferEngine answers: its descriptor (P2PHANDSHAKE), notifications,
// liveness probes and transport exchanges.
#include "engine/engine_impl.h"
#include "rpc/messages.h"

namespace ferry {

Status TransferEngine::Impl::RegisterRpcHandlers() {
  RETURN_IF_ERROR(rpc_server_->RegisterHandler(
      ToWire(RpcType::kGetSegmentDesc),
      [this](std::string_view payload, const PeerInfo&) -> Result<std::string> {
        ASSIGN_OR_RETURN(std::string key, UnpackGetSegmentDescRequest(payload));
        std::string value;
        {
          MutexLock lock(served_mu_);
          auto it = served_.find(key);
          if (it == served_.end()) return NotFoundError("no key '" + key + "' at " + name_);
          value = it->second;
        }
        // Served only after the first Publish, so publisher_ is set (and outlives this server).
        // A name another engine took over is no longer this engine's to hand out: a peer that
        // asks after the store lost the new holder's keys must not find this engine under it.
        if (publisher_->taken_over(name_)) {
          return NotFoundError("segment name '" + name_ +
                               "' was taken over by another engine; not serving it here");
        }
        return value;
      }));
  RETURN_IF_ERROR(rpc_server_->RegisterHandler(
      ToWire(RpcType::kNotify),
      [this](std::string_view payload, const PeerInfo&) -> Result<std::string> {
        ASSIGN_OR_RETURN(NotifyRequest request, UnpackNotifyRequest(payload));
        // Busy past the box's caps: the sender's sendNotify fails with it.
        RETURN_IF_ERROR(notify_box_->Push(
            {std::move(request.segment_name), std::move(request.notify)}));
        counters_->notifications().received.fetch_add(1, std::memory_order_relaxed);
        return std::string();
      }));
  RETURN_IF_ERROR(rpc_server_->RegisterHandler(
      ToWire(RpcType::kProbe),
      [this](std::string_view payload, const PeerInfo&) -> Result<std::string> {
        RETURN_IF_ERROR(UnpackEmpty(payload, "probe request"));
        return Pack(ProbeResponse{incarnation_, name_});
      }));
  return rpc_server_->RegisterHandler(
      ToWire(RpcType::kExchange),
      [this](std::string_view payload, const PeerInfo&) -> Result<std::string> {
        ASSIGN_OR_RETURN(ExchangeRequest request, UnpackExchangeRequest(payload));
        Transport* t = FindTransport(request.transport);
        if (t == nullptr)
          return NotFoundError("no transport '" + request.transport + "' at " + name_);
        return t->OnExchange(request.bytes);
      });
}

}  // namespace ferry
