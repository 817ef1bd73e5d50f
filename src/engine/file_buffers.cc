// File buffers of TransferEngine::Impl (registerLocalFile / unregisterLocalFile): a window of a
// file or block device registered as a buffer of this segment, carried by a transport with
// TransportCapabilities::file_buffers (transport/file).
//
// Representation: the registry holds a file buffer as a region like any other (generation,
// pins, the safe unregister order), at addresses this engine assigns from a range no process
// memory occupies (next_file_addr_), with RegionSpec::file set: the window's identity and path
// map, published as BufferDesc::file. Its one binding is the file transport's, whose
// unregister callback closes the file after the region's pins drained. The data path routes a
// request whose covering buffer is a file window to that transport (selection_policy.cc),
// including requests to this engine's own segment (never a memcpy), and refuses a file
// address as a request's local side.
#include <climits>
#include <cstdlib>

#include "engine/engine_impl.h"

namespace ferry {

namespace {

constexpr uint64_t kFileAlign = uint64_t{2} << 20;  // file buffers start 2 MiB apart at least
constexpr size_t kMaxHostPaths = 64;                // as the codec (FileWindow::paths)

}  // namespace

Result<uint64_t> TransferEngine::Impl::RegisterFile(
    const std::string& path, uint64_t length, uint64_t offset,
    const std::map<std::string, std::string>& host_paths, const std::string& location) {
  Transport* carrier = nullptr;
  for (const auto& t : transports_) {
    if (t->capabilities().file_buffers) carrier = t.get();
  }
  if (carrier == nullptr) {
    return InvalidArgumentError(
        "registerLocalFile: no installed transport carries file buffers (the 'file' transport "
        "needs io_uring; install it with EngineOptions::transports \"auto\" or \"file\")");
  }
  if (path.empty() || length == 0) {
    return InvalidArgumentError("registerLocalFile: needs a path and length > 0");
  }
  ASSIGN_OR_RETURN(Location where, Location::Parse(location));
  if (where.kind == Location::Kind::kDetect) where = Location::Cpu();
  if (!where.is_host()) {
    return InvalidArgumentError(
        "registerLocalFile: a file buffer's location is host memory "
        "(\"cpu\" or \"cpu:<numa>\"), not '" +
        location + "'");
  }
  if (host_paths.size() >= kMaxHostPaths) {
    return InvalidArgumentError("registerLocalFile: at most " + std::to_string(kMaxHostPaths - 1) +
                                " host paths besides this host's");
  }
  for (const auto& [host, other] : host_paths) {
    if (host.empty() || other.empty()) {
      return InvalidArgumentError("registerLocalFile: a host path entry needs a host and a path");
    }
  }
  if (const size_t held = registry_->size(); held >= options_.max_segment_buffers) {
    return InvalidArgumentError("registering a file buffer would make segment '" + name_ +
                                "' hold more than " + std::to_string(options_.max_segment_buffers) +
                                " buffers (EngineOptions::max_segment_buffers)");
  }
  char resolved[PATH_MAX];
  const std::string own_path = ::realpath(path.c_str(), resolved) != nullptr ? resolved : path;

  const uint64_t span = (length + 2 * kFileAlign - 1) / kFileAlign * kFileAlign;
  const uint64_t addr = next_file_addr_.fetch_add(span);
  if (addr > UINT64_MAX - span) {
    return InvalidArgumentError("registerLocalFile: this engine's file address range is used up");
  }
  ASSIGN_OR_RETURN(FileWindow window, carrier->RegisterFile(addr, length, path, offset));
  window.paths = host_paths;
  const std::string& host =
      base_desc_.host.hostname.empty() ? std::string("localhost") : base_desc_.host.hostname;
  window.paths[host] = own_path;

  RegionSpec spec{.addr = addr, .length = length, .location = where, .remote_accessible = true};
  spec.file = std::move(window);
  spec.binding.transport = std::string(carrier->name());
  spec.binding.on_unregister = [carrier, addr] { return carrier->UnregisterFile(addr); };
  Result<uint64_t> generation = registry_->Register(spec);
  if (!generation.ok()) {
    carrier->UnregisterFile(addr).IgnoreError();
    return generation.status();
  }
  Status published = Publish();
  if (!published.ok() &&
      !(published.code() == StatusCode::kAlreadyExists && publisher_->taken_over(name_))) {
    // The caller gets no address to unregister with: undo (nothing can have used it).
    registry_->Unregister(addr).IgnoreError();
    return published.WithContext("registerLocalFile: publishing the descriptor");
  }
  return addr;
}

Status TransferEngine::Impl::UnregisterFile(uint64_t addr) {
  Result<BufferDesc> region = registry_->Lookup(addr);
  if (!region.ok() || region->addr != addr || !region->file.has_value()) {
    return NotFoundError("unregisterLocalFile: no file buffer starts at " + std::to_string(addr));
  }
  return UnregisterMemory({reinterpret_cast<void*>(addr)}, true);
}

}  // namespace ferry
