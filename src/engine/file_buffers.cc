// File buffers of TransferEngine::Impl (registerLocalFile / unregisterLocalFile): a window of a
// file or block device registered as a buffer of this segment, carried by a transport with
// TransportCapabilities::file_buffers (transport/file).
//
// Representation: the registry holds a file buffer as a region like any other (generation,
// pins, the safe unregister order), at addresses this engine assigns from a range no process
// memory occupies ([kFileAddressBase, 2^64): next_file_addr_), with RegionSpec::file set: the
// window's identity and path map, published as BufferDesc::file. Its bindings: the file
// transport's, whose unregister callback closes the file after the region's pins drained, and,
// when tcp is installed, tcp's, through which peers that cannot open the file reach it (below).
// The data path routes a request whose covering buffer is a file window to the file transport
// when that reaches it (this engine's own segment: always, never a memcpy; a peer's: when the
// file is visible here, Transport::Reaches), through the owner over tcp otherwise
// (selection_policy.cc); it refuses a file address as a request's local side.
//
// Through the owner: the owner's tcp target, on an access to a file address, pins it as any
// remote access (PinRemoteAccess, for "tcp": generation, window, closing) and calls
// StartStagedIo (StartFileIo here), which hands the file transport one slice between the file
// and the target's staging buffer,
// planned against this engine's own segment: the file transport pins it again (for "file") and
// holds both pins until the I/O ended, so an unregister drains owner-side I/O exactly as it
// drains memory accesses. Its completion comes back through CompleteSlice (CompleteFileIo),
// marked by Slice::task pointing at kFileIoTag, and runs the target's callback.
#include <climits>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

#include "engine/engine_impl.h"

namespace ferry {

namespace {

constexpr uint64_t kFileAlign = uint64_t{2} << 20;  // file buffers start 2 MiB apart at least
constexpr size_t kMaxHostPaths = 64;                // as the codec (FileWindow::paths)
// The transport whose target serves file buffers through their owner (StartFileIo).
constexpr std::string_view kOwnerTransport = "tcp";

// A StartFileIo in flight: the slice the file transport carries, what to run when it ends, and
// the caller's pin (held with the file transport's own until then).
struct FileIoSlice : Slice {
  std::function<void(const Status&)> done;
  AccessPin pin;
};
char kFileIoTag;  // Slice::task of every FileIoSlice

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
  std::vector<RegionSpec> specs{spec};
  if (Transport* owner_path = FindTransport(kOwnerTransport)) {
    // The second binding: peers that cannot open the file go through this engine over tcp.
    Result<std::string> key =
        owner_path->RegisterMemory(addr, length, where, MemoryAccess::kRemote);
    if (!key.ok()) {
      carrier->UnregisterFile(addr).IgnoreError();
      return key.status().WithContext("registerLocalFile: registering with tcp");
    }
    RegionSpec through = spec;
    through.binding.transport = std::string(kOwnerTransport);
    through.binding.key = std::move(key).value();
    through.binding.on_unregister = [owner_path, addr, length] {
      return owner_path->UnregisterMemory(addr, length);
    };
    specs.push_back(std::move(through));
  }
  Result<std::vector<uint64_t>> generation = registry_->RegisterBatch(specs);
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
  // Every region at a file address is a file buffer. Not Lookup: it hides a closing region, and
  // a call whose drain timed out leaves the buffer closing, for this call to resume the wait.
  if (!IsFileAddress(addr)) {
    return NotFoundError("unregisterLocalFile: no file buffer starts at " + std::to_string(addr));
  }
  Status s = UnregisterMemory({reinterpret_cast<void*>(addr)}, true);
  if (s.code() == StatusCode::kNotFound) return s.WithContext("unregisterLocalFile");
  return s;
}

Result<std::shared_ptr<PeerLink>> TransferEngine::Impl::OwnFileLink(Transport* carrier) {
  MutexLock lock(file_link_mu_);
  if (own_file_link_ == nullptr) {
    ASSIGN_OR_RETURN(own_file_link_, carrier->Connect(base_desc_));  // base_desc_: this engine
  }
  return own_file_link_;
}

Status TransferEngine::Impl::StartFileIo(StagedIo io, AccessPin pin) {
  if (!IsFileAddress(io.addr) || io.staging == nullptr ||
      (io.op != OpCode::kRead && io.op != OpCode::kWrite)) {
    return InvalidArgumentError("StartFileIo: [" + std::to_string(io.addr) + ", +" +
                                std::to_string(io.length) +
                                ") is not a file access with a staging buffer");
  }
  Transport* carrier = nullptr;
  for (const auto& t : transports_) {
    if (t->capabilities().file_buffers) carrier = t.get();
  }
  if (carrier == nullptr) return UnavailableError("no file transport serves file buffers here");
  ASSIGN_OR_RETURN(std::shared_ptr<PeerLink> link, OwnFileLink(carrier));
  auto* slice = new FileIoSlice();
  slice->op = io.op;
  slice->local_addr = reinterpret_cast<uint64_t>(io.staging);
  slice->remote_addr = io.addr;
  slice->length = io.length;
  slice->remote_generation = io.generation;
  slice->peer_incarnation = io.incarnation;
  slice->deadline = io.deadline;
  slice->task = &kFileIoTag;
  slice->done = std::move(io.done);
  slice->pin = std::move(pin);
  Slice* const slices[] = {slice};
  Status submitted = carrier->Submit(*link, slices);
  if (!submitted.ok()) {
    delete slice;  // nothing was queued or completed (the Transport contract): `done` never runs
    return submitted.WithContext("file buffer access through the owner");
  }
  return Status::Ok();
}

bool TransferEngine::Impl::CompleteFileIo(Slice* slice, const Status& status) {
  if (slice->task != &kFileIoTag) return false;
  std::unique_ptr<FileIoSlice> io(static_cast<FileIoSlice*>(slice));
  std::function<void(const Status&)> done = std::move(io->done);
  io.reset();  // both pins go before the caller learns the I/O ended
  done(status);
  return true;
}

}  // namespace ferry
