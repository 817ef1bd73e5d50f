#include "transport/cxl/cxl_transport.h"

#include <utility>

#include "transport/cxl/cxl_copier.h"
#include "transport/cxl/cxl_runtime.h"
#include "transport/cxl/cxl_wire.h"

namespace ferry {
namespace {

Status Validate(const CxlTransportOptions& o) {
  if (o.window_path.empty()) {
    return InvalidArgumentError(
        "cxl window_path is empty: the cxl transport is not usable without a window");
  }
  if (o.socket_dir.empty()) return InvalidArgumentError("cxl socket_dir is empty");
  return Status::Ok();  // the rest is checked by the copy engine
}

// Maps the window and makes its allocator.
Result<std::shared_ptr<cxl::WindowState>> OpenWindow(const CxlTransportOptions& o) {
  ASSIGN_OR_RETURN(std::unique_ptr<cxl::CxlWindow> window,
                   cxl::CxlWindow::Open(o.window_path, o.window_size));
  auto state = std::make_shared<cxl::WindowState>();
  state->window = std::move(window);
  state->allocator = std::make_unique<cxl::CxlAllocator>(state->window.get());
  return state;
}

}  // namespace

CxlTransport::CxlTransport(CxlTransportOptions options) : options_(std::move(options)) {}

CxlTransport::~CxlTransport() { Stop(); }

TransportCapabilities CxlTransport::capabilities() const {
  TransportCapabilities caps;
  caps.reaches_other_hosts = false;
  caps.reaches_device_memory = false;
  caps.allocates_shared_memory = true;
  caps.preferred_slice_size = uint64_t{256} << 10;  // the copy workers share a request's slices
  return caps;
}

Result<std::string> CxlTransport::Start(TransportContext* ctx, const TransportStartInfo& info) {
  MutexLock lock(lifecycle_mu_);
  if (started_.load() || stopped_) return BusyError("cxl transport already started or stopped");
  if (ctx == nullptr) return InvalidArgumentError("cxl Start: null context");
  RETURN_IF_ERROR(Validate(options_));
  auto rt = std::make_shared<cxl::CxlRuntime>();
  samehost::CopyEngineOptions engine_options;
  engine_options.transport = "cxl";
  engine_options.io_timeout = options_.io_timeout;
  engine_options.workers = options_.workers;
  engine_options.max_queued_slices = options_.max_queued_slices;
  engine_options.max_batch = cxl::kMaxRangesPerAcquire;
  engine_options.idle_timeout = options_.idle_timeout;
  engine_options.auth_secret = info.auth_secret;  // grant connections authenticate with it
  ASSIGN_OR_RETURN(rt->engine, samehost::CopyEngine::Start(ctx, engine_options));
  ASSIGN_OR_RETURN(rt->window, OpenWindow(options_));
  samehost::GrantServer::Options grant;
  grant.transport = "cxl";
  grant.auth_secret = info.auth_secret;
  grant.dir = options_.socket_dir;
  grant.max_ranges_per_acquire = cxl::kMaxRangesPerAcquire;
  ASSIGN_OR_RETURN(rt->grant_server, samehost::GrantServer::Start(ctx, std::move(grant)));
  const cxl::CxlWindow& window = *rt->window->window;
  cxl::Endpoint endpoint{window.identity(), reinterpret_cast<uint64_t>(window.base()),  // NOLINT
                         rt->grant_server->path()};
  runtime_ = std::move(rt);
  started_.store(true, std::memory_order_release);
  return cxl::EncodeEndpoint(endpoint);
}

void CxlTransport::Stop() {
  MutexLock lock(lifecycle_mu_);
  if (stopped_) return;
  stopped_ = true;
  if (!started_.load(std::memory_order_acquire)) return;
  runtime_->engine->Stop();
  runtime_->grant_server.reset();  // closes peers' connections, releasing their pins
}

Result<std::string> CxlTransport::RegisterMemory(uint64_t addr, uint64_t length,
                                                 const Location& location,
                                                 MemoryAccess /*access*/) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("cxl transport not started");
  if (length == 0) return InvalidArgumentError("cxl RegisterMemory: length 0");
  if (location.is_device()) {
    return NotFoundError("cxl reaches only its window in host memory, not " + location.ToString());
  }
  const cxl::CxlWindow& window = *runtime_->window->window;
  if (!window.Contains(addr, length)) {
    return NotFoundError("cxl: the region is not inside the window '" + window.identity().path +
                         "'");
  }
  return cxl::EncodeKey({window.OffsetOf(addr), length});
}

Status CxlTransport::UnregisterMemory(uint64_t /*addr*/, uint64_t /*length*/) {
  return Status::Ok();
}

Result<void*> CxlTransport::AllocateShared(size_t length, const Location& location) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("cxl transport not started");
  if (location.is_device()) {
    return InvalidArgumentError("cxl allocates host memory in its window, not " +
                                location.ToString());
  }
  return runtime_->window->allocator->Allocate(length);
}

Status CxlTransport::FreeShared(void* addr) {
  if (!started_.load(std::memory_order_acquire)) {
    return NotFoundError("cxl transport not started: it allocated nothing");
  }
  return runtime_->window->allocator->Free(addr);
}

Result<std::shared_ptr<PeerLink>> CxlTransport::Connect(const SegmentDesc& peer) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("cxl transport not started");
  const std::string peer_name = "segment '" + peer.name + "'";
  const auto it = peer.transports.find("cxl");
  if (it == peer.transports.end()) {
    return InvalidArgumentError(peer_name + " publishes no cxl endpoint");
  }
  Result<cxl::Endpoint> endpoint = cxl::DecodeEndpoint(it->second);
  if (!endpoint.ok()) return endpoint.status().WithContext(peer_name);
  const cxl::WindowIdentity& ours = runtime_->window->window->identity();
  if (!endpoint->window.SameWindowAs(ours)) {
    return UnavailableError(peer_name + ": peer maps another cxl window ('" +
                            endpoint->window.path + "', " + std::to_string(endpoint->window.size) +
                            " bytes; ours is '" + ours.path + "', " + std::to_string(ours.size) +
                            " bytes)");
  }
  std::string grant_path = endpoint->grant_path;
  return runtime_->engine->MakeLink(
      std::move(grant_path), peer_name,
      std::make_unique<cxl::CxlCopier>(runtime_->window, std::move(endpoint).value()));
}

Status CxlTransport::Submit(PeerLink& link, std::span<Slice* const> slices) {
  if (!started_.load(std::memory_order_acquire)) return BusyError("cxl transport not started");
  return runtime_->engine->Submit(link, slices);
}

Result<std::string> CxlTransport::OnExchange(std::string_view /*payload*/) {
  return InvalidArgumentError("cxl uses no exchange");
}

void* CxlTransport::window_base() const {
  if (!started_.load(std::memory_order_acquire)) return nullptr;
  return runtime_->window->window->base();
}

uint64_t CxlTransport::window_size() const {
  if (!started_.load(std::memory_order_acquire)) return 0;
  return runtime_->window->window->size();
}

std::shared_ptr<cxl::WindowState> CxlTransport::window_state() const {
  if (!started_.load(std::memory_order_acquire)) return nullptr;
  return runtime_->window;
}

std::unique_ptr<Transport> CreateCxlTransport(CxlTransportOptions options) {
  return std::make_unique<CxlTransport>(std::move(options));
}

}  // namespace ferry
