#include "rpc/rpc_server.h"

#include <exception>

#include "common/log.h"
#include "common/peer_auth.h"
#include "rpc/frame.h"
#include "rpc/server_loop.h"
#include "rpc/socket_io.h"
#include "rpc/worker_pool.h"

namespace ferry {
namespace {

Status ValidateOptions(const RpcServerOptions& o) {
  if (o.bind_host.empty()) return InvalidArgumentError("rpc server: empty bind_host");
  if (o.max_frame_bytes == 0 || o.max_frame_bytes > rpc::kMaxEncodablePayload) {
    return InvalidArgumentError("rpc server: max_frame_bytes must be 1..4294967295");
  }
  if (o.io_timeout.count() <= 0 || o.idle_timeout.count() <= 0) {
    return InvalidArgumentError("rpc server: io_timeout and idle_timeout must be positive");
  }
  if (o.max_connections == 0 || o.worker_threads == 0) {
    return InvalidArgumentError("rpc server: max_connections and worker_threads must be >= 1");
  }
  return auth::ValidateSecret(o.auth_secret).WithContext("rpc server");
}

}  // namespace

Result<std::unique_ptr<RpcServer>> RpcServer::Create(const RpcServerOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  ASSIGN_OR_RETURN(rpc::TcpListener listener,
                   rpc::ListenTcp(options.bind_host, options.port, options.port_range_end,
                                  options.fallback_ports));
  std::unique_ptr<RpcServer> server(new RpcServer(options, listener.port));
  rpc::ServerLoop::Options loop_options;
  loop_options.limits.max_frame_bytes = options.max_frame_bytes;
  loop_options.limits.io_timeout = options.io_timeout;
  loop_options.limits.idle_timeout = options.idle_timeout;
  loop_options.max_connections = options.max_connections;
  loop_options.auth_secret = options.auth_secret;
  RpcServer* self = server.get();
  server->loop_ =
      std::make_unique<rpc::ServerLoop>(std::move(listener.fd), loop_options,
                                        [self](const PeerInfo& peer, rpc::InboundRequest request) {
                                          return self->Dispatch(peer, std::move(request));
                                        });
  server->pool_ = std::make_unique<rpc::WorkerPool>(options.worker_threads);
  return server;
}

RpcServer::RpcServer(const RpcServerOptions& options, uint16_t port)
    : options_(options), port_(port) {}

RpcServer::~RpcServer() { Stop(); }

Status RpcServer::RegisterHandler(uint16_t type, Handler handler) {
  if (!handler)
    return InvalidArgumentError("rpc server: empty handler for type " + std::to_string(type));
  MutexLock lock(mu_);
  if (started_ || stopped_) return BusyError("rpc server: RegisterHandler after Start");
  if (!handlers_.emplace(type, std::move(handler)).second) {
    return AlreadyExistsError("rpc server: type " + std::to_string(type) + " has a handler");
  }
  return Status::Ok();
}

Status RpcServer::Start() {
  MutexLock lock(mu_);
  if (stopped_) return BusyError("rpc server was stopped and cannot restart");
  if (started_) return Status::Ok();
  RETURN_IF_ERROR(pool_->Start());
  if (Status s = loop_->Start(); !s.ok()) {
    pool_->Stop();
    return s;
  }
  started_ = true;
  return Status::Ok();
}

void RpcServer::Stop() {
  MutexLock lock(mu_);  // held throughout, so a second Stop() returns only once stopped
  if (stopped_) return;
  stopped_ = true;
  loop_->Stop();  // first: no new requests, peers see their connections close
  pool_->Stop();  // then: drop queued requests, wait for running handlers
}

uint64_t RpcServer::bad_frames() const { return loop_->bad_frames(); }
uint64_t RpcServer::connections_accepted() const { return loop_->connections_accepted(); }
uint64_t RpcServer::connections_rejected() const { return loop_->connections_rejected(); }
size_t RpcServer::open_connections() const { return loop_->open_connections(); }
uint64_t RpcServer::auth_refusals() const { return loop_->auth_refusals(); }

bool RpcServer::Dispatch(const PeerInfo& peer, rpc::InboundRequest request) {
  auto job = std::make_shared<std::pair<PeerInfo, rpc::InboundRequest>>(peer, std::move(request));
  return pool_->Submit([this, job] { Serve(job->first, job->second); });
}

Result<std::string> RpcServer::CallHandler(uint16_t type, std::string_view payload,
                                           const PeerInfo& peer) {
  auto it = handlers_.find(type);
  if (it == handlers_.end()) {
    return InvalidArgumentError("unknown rpc type " + std::to_string(type));
  }
  try {
    return it->second(payload, peer);
  } catch (const std::exception& e) {
    FERRY_LOG(kError) << "rpc handler for type " << type << " threw: " << e.what();
    return InternalError(std::string("rpc handler threw: ") + e.what());
  } catch (...) {
    FERRY_LOG(kError) << "rpc handler for type " << type << " threw a non-std exception";
    return InternalError("rpc handler threw");
  }
}

void RpcServer::Serve(const PeerInfo& peer, const rpc::InboundRequest& request) {
  rpc::FrameHeader header;
  header.type = request.header.type;
  header.request_id = request.header.request_id;
  header.flags = rpc::kFlagResponse;
  Result<std::string> result = CallHandler(header.type, request.payload, peer);
  if (result.ok() && result->size() > options_.max_frame_bytes) {
    FERRY_LOG(kError) << "rpc handler for type " << header.type << " returned " << result->size()
                      << " bytes, above max_frame_bytes";
    result = InternalError("rpc response of " + std::to_string(result->size()) +
                           " bytes exceeds the frame limit");
  }
  std::string payload;
  if (result.ok()) {
    payload = std::move(result).value();
  } else {
    header.flags |= rpc::kFlagError;
    payload = rpc::EncodeErrorPayload(result.status());
  }
  Result<std::string> frame = rpc::EncodeFrame(header, payload);  // fits: checked above
  if (frame.ok()) loop_->PostResponse(peer.connection_id, std::move(frame).value());
}

}  // namespace ferry
