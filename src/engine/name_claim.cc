// TransferEngine::Impl::ClaimName: the ownership step of init() (names are owned). Before the
// first Publish, the entries under this engine's name are looked at: a live holder keeps its
// name unless take_over_name says otherwise; a holder that does not answer is taken over.
#include "common/log.h"
#include "core/segment_desc_codec.h"
#include "engine/engine_impl.h"
#include "rpc/messages.h"

namespace ferry {

namespace {

// "engine at h:p (incarnation N)" for messages.
std::string HolderText(const SegmentDesc& holder) {
  return "engine at " + HostPort{holder.rpc.host, holder.rpc.port}.ToString() + " (incarnation " +
         std::to_string(holder.incarnation) + ")";
}

}  // namespace

Status TransferEngine::Impl::ClaimName() {
  // P2PHANDSHAKE publishes nowhere: the name is host:port, which the OS keeps unique.
  if (store_->scheme() == "p2p") return Status::Ok();
  const std::string desc_key = SegmentDescKey(options_.metadata_prefix, name_);
  const std::string meta_key = RpcMetaKey(options_.metadata_prefix, name_);
  const std::string context = "checking who holds segment name '" + name_ + "'";
  Result<std::string> held = store_->Get(desc_key);
  if (!held.ok() && held.status().code() != StatusCode::kNotFound) {
    return held.status().WithContext(context);
  }
  Result<std::string> meta = store_->Get(meta_key);
  if (!meta.ok() && meta.status().code() != StatusCode::kNotFound) {
    return meta.status().WithContext(context);
  }
  if (!held.ok()) {
    // No descriptor: no engine to ask. An rpc_meta entry alone is a leftover (a holder that died
    // between its two writes), replaced.
    if (meta.ok()) publisher_->AllowReplacing(meta_key, *meta);
    return Status::Ok();
  }
  Result<SegmentDesc> holder = DecodeSegmentDesc(*held);
  std::string who;
  bool live = false;
  if (!holder.ok()) {
    // Nobody can reach an engine through it, this one's peers included.
    who = "a descriptor that does not decode (" + holder.status().message() + ")";
  } else {
    who = HolderText(*holder);
    bool same = false;
    Result<ProbeResponse> reply = ProbePeer(*holder, &same);
    if (reply.ok()) {
      live = same && holder->name == name_;
    } else if (reply.status().code() == StatusCode::kPermissionDenied) {
      // Something answers there and refuses us (another cluster secret): it may well be the
      // holder, so the name is not taken from it without being told to.
      live = true;
      who += ", which answers but refused this engine's probe (" + reply.status().message() + ")";
    }
  }
  if (live && !options_.take_over_name) {
    return AlreadyExistsError("segment name '" + name_ + "' is held by a live " + who +
                              " in the metadata store; stop that engine, choose another "
                              "local_server_name, or set take_over_name to take the name over");
  }
  if (live) {
    FERRY_LOG(kWarn) << "taking segment name '" << name_ << "' over from the live " << who
                     << " (take_over_name): peers resolving it now reach this engine";
  } else {
    FERRY_LOG(kWarn) << "taking segment name '" << name_ << "' over from " << who
                     << ", which does not answer (dead or frozen; its entries had not expired)";
  }
  publisher_->AllowReplacing(desc_key, *held);
  if (meta.ok()) publisher_->AllowReplacing(meta_key, *meta);
  return Status::Ok();
}

}  // namespace ferry
