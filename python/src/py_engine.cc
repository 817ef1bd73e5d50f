#include "py_engine.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

namespace ferry::python {

namespace {

std::string Hex(uint64_t addr) {
  std::ostringstream out;
  out << "0x" << std::hex << addr;
  return out.str();
}

std::string Range(uint64_t addr, uint64_t length) {
  return "[" + Hex(addr) + ", " + Hex(addr + length) + ")";
}

}  // namespace

PyEngine::~PyEngine() {
  // Anonymous managed buffers are this object's: unmapped after the engine forgot them. The
  // engine's own managed buffers and the caller's registrations go with the engine.
  std::map<uint64_t, Region> regions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    regions.swap(regions_);
  }
  for (const auto& [addr, region] : regions) {
    if (region.kind != Region::Kind::kAnonymous) continue;
    if (engine_.unregisterLocalMemory(Ptr(addr)).ok()) munmap(Ptr(addr), region.length);
  }
}

Status PyEngine::Init(const EngineOptions& options) {
  options_ = options;
  RETURN_IF_ERROR(engine_.init(options));
  initialized_ = true;
  return Status::Ok();
}

bool PyEngine::SharesMemory() const {
  for (const std::string& t : options_.transports) {
    if (t == "auto" || t == "shm" || t == "cxl") return true;
  }
  return options_.transports.empty();
}

std::chrono::milliseconds PyEngine::BatchBound() const {
  return options_.task_timeout + options_.request_timeout;
}

Status PyEngine::Register(uint64_t addr, uint64_t length, const std::string& location,
                          bool remote_accessible) {
  RETURN_IF_ERROR(engine_.registerLocalMemory(Ptr(addr), length, location, remote_accessible));
  std::lock_guard<std::mutex> lock(mu_);
  regions_[addr] = Region{length, Region::Kind::kRegistered};
  return Status::Ok();
}

Status PyEngine::Unregister(uint64_t addr) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find(addr);
    if (it != regions_.end() && it->second.kind != Region::Kind::kRegistered) {
      return InvalidArgumentError(Range(addr, it->second.length) +
                                  " is a managed buffer: free it with free_managed_buffer");
    }
  }
  RETURN_IF_ERROR(engine_.unregisterLocalMemory(Ptr(addr)));
  std::lock_guard<std::mutex> lock(mu_);
  regions_.erase(addr);
  return Status::Ok();
}

Status PyEngine::RegisterBatch(const std::vector<uint64_t>& addrs,
                               const std::vector<uint64_t>& lengths, const std::string& location) {
  if (addrs.size() != lengths.size()) {
    return InvalidArgumentError("batch registration: " + std::to_string(addrs.size()) +
                                " addresses but " + std::to_string(lengths.size()) + " lengths");
  }
  std::vector<BufferEntry> entries;
  entries.reserve(addrs.size());
  for (size_t i = 0; i < addrs.size(); ++i) entries.push_back({Ptr(addrs[i]), lengths[i]});
  RETURN_IF_ERROR(engine_.registerLocalMemoryBatch(entries, location));
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < addrs.size(); ++i) {
    regions_[addrs[i]] = Region{lengths[i], Region::Kind::kRegistered};
  }
  return Status::Ok();
}

Status PyEngine::UnregisterBatch(const std::vector<uint64_t>& addrs) {
  std::vector<void*> ptrs;
  ptrs.reserve(addrs.size());
  for (uint64_t a : addrs) ptrs.push_back(Ptr(a));
  RETURN_IF_ERROR(engine_.unregisterLocalMemoryBatch(ptrs));
  std::lock_guard<std::mutex> lock(mu_);
  for (uint64_t a : addrs) regions_.erase(a);
  return Status::Ok();
}

Result<uint64_t> PyEngine::AllocateManaged(uint64_t length, const std::string& location) {
  if (length == 0) return InvalidArgumentError("cannot allocate a managed buffer of 0 bytes");
  // A managed buffer here is viewed as a memoryview / numpy array: host memory only. Device
  // memory (the C++ allocateManagedBuffer's "cuda:<n>") would hand Python a view it must never
  // touch.
  if (location.rfind("cuda", 0) == 0) {
    return InvalidArgumentError("managed buffers in Python are host memory (viewed as "
                                "memoryview / numpy), not '" +
                                location + "'; register device memory you allocated instead");
  }
  if (SharesMemory()) {
    ASSIGN_OR_RETURN(void* p, engine_.allocateManagedBuffer(length, location));
    const auto addr = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
    std::lock_guard<std::mutex> lock(mu_);
    regions_[addr] = Region{length, Region::Kind::kEngineManaged};
    return addr;
  }
  void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return UnavailableError("allocating a managed buffer of " + std::to_string(length) +
                            " bytes: mmap: " + std::strerror(errno));
  }
  Status registered = engine_.registerLocalMemory(p, length, location == "cpu" ? "*" : location);
  if (!registered.ok()) {
    munmap(p, length);
    return registered;
  }
  const auto addr = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
  std::lock_guard<std::mutex> lock(mu_);
  regions_[addr] = Region{length, Region::Kind::kAnonymous};
  return addr;
}

Status PyEngine::FreeManaged(uint64_t addr, uint64_t length) {
  Region region;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find(addr);
    if (it == regions_.end() || it->second.kind == Region::Kind::kRegistered) {
      return NotFoundError(Hex(addr) + " is not a managed buffer of this engine");
    }
    if (length != 0 && length != it->second.length) {
      return InvalidArgumentError("managed buffer " + Range(addr, it->second.length) + " is " +
                                  std::to_string(it->second.length) + " bytes, not " +
                                  std::to_string(length));
    }
    region = it->second;
  }
  if (region.kind == Region::Kind::kEngineManaged) {
    RETURN_IF_ERROR(engine_.freeManagedBuffer(Ptr(addr)));
  } else {
    RETURN_IF_ERROR(engine_.unregisterLocalMemory(Ptr(addr)));
    munmap(Ptr(addr), region.length);
  }
  std::lock_guard<std::mutex> lock(mu_);
  regions_.erase(addr);
  return Status::Ok();
}

Status PyEngine::CheckInside(uint64_t addr, uint64_t length, std::string_view what) const {
  if (addr + length < addr) {
    return InvalidArgumentError(std::string(what) + ": range at " + Hex(addr) + " of " +
                                std::to_string(length) + " bytes wraps around");
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.upper_bound(addr);
  if (it != regions_.begin()) {
    --it;
    if (addr >= it->first && addr + length <= it->first + it->second.length) return Status::Ok();
  }
  return InvalidArgumentError(std::string(what) + ": " + Range(addr, length) +
                              " is not inside memory registered with (or allocated by) this "
                              "engine");
}

Status PyEngine::CopyIn(uint64_t addr, const void* src, uint64_t length) {
  RETURN_IF_ERROR(CheckInside(addr, length, "write_bytes_to_buffer"));
  if (length > 0) std::memcpy(Ptr(addr), src, length);
  return Status::Ok();
}

Status PyEngine::CopyOut(uint64_t addr, void* dst, uint64_t length) {
  RETURN_IF_ERROR(CheckInside(addr, length, "read_bytes_from_buffer"));
  if (length > 0) std::memcpy(dst, Ptr(addr), length);
  return Status::Ok();
}

Result<BatchId> PyEngine::Submit(const std::vector<TransferRequest>& requests,
                                 const std::optional<std::string>& notify) {
  if (requests.empty()) return InvalidArgumentError("a transfer needs at least one request");
  ASSIGN_OR_RETURN(BatchId batch, engine_.allocateBatchID(requests.size()));
  Status submitted = notify.has_value()
                         ? engine_.submitTransferWithNotify(batch, requests, {"", *notify})
                         : engine_.submitTransfer(batch, requests);
  if (!submitted.ok()) {
    // Nothing of a refused submission is queued, so the batch frees at once.
    engine_.freeBatchID(batch).IgnoreError();
    return submitted;
  }
  return batch;
}

Result<BatchStatus> PyEngine::TransferSync(const std::vector<TransferRequest>& requests,
                                           const std::optional<std::string>& notify) {
  ASSIGN_OR_RETURN(BatchId batch, Submit(requests, notify));
  Result<BatchStatus> summary = engine_.waitBatch(batch, BatchBound());
  if (!summary.ok()) {
    // Every task ends by its deadline, so this is a broken promise; still never leak the batch.
    engine_.cancelBatch(batch).IgnoreError();
    engine_.waitBatch(batch, options_.request_timeout).status().IgnoreError();
  }
  engine_.freeBatchID(batch).IgnoreError();
  if (!summary.ok()) return summary.status();
  if (summary->state != TransferState::kCompleted) {
    Status first = summary->first_error;
    if (first.ok()) first = InternalError("batch ended without completing and without a reason");
    return Status(first.code(), std::string(TransferStateName(summary->state)) + ": " +
                                    std::to_string(summary->failed) + " of " +
                                    std::to_string(summary->tasks) +
                                    " transfers did not "
                                    "complete; first: " +
                                    first.message());
  }
  return summary;
}

}  // namespace ferry::python
