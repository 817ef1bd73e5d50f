#include "transport/conformance/test_context.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/log.h"

namespace ferry::transport_testing {

void TestContext::AddRegion(const void* addr, uint64_t length, uint64_t generation,
                            bool remote_accessible, std::string transport) {
  MutexLock lock(mu_);
  regions_.push_back(Region{reinterpret_cast<uint64_t>(addr), length, generation,  // NOLINT
                            remote_accessible, std::move(transport), false});
}

bool TestContext::CloseRegion(const void* addr) {
  MutexLock lock(mu_);
  // The last region added at `addr`, the one PinRemoteAccess and LeaseRemoteRegion find there.
  for (auto it = regions_.rbegin(); it != regions_.rend(); ++it) {
    Region& r = *it;
    if (r.addr == reinterpret_cast<uint64_t>(addr)) {  // NOLINT
      r.closing = true;
      for (auto& [id, lease] : leases_) {
        if (lease.region_addr == r.addr && !lease.revoked) {
          lease.revoked = true;
          lease.on_revoke();
        }
      }
      return true;
    }
  }
  return false;
}

void TestContext::AddPeer(const std::string& segment, Transport* peer) {
  MutexLock lock(mu_);
  peers_[segment] = peer;
}

Result<AccessPin> TestContext::PinRemoteAccess(uint64_t addr, uint64_t length, uint64_t incarnation,
                                               uint64_t generation, std::string_view transport) {
  MutexLock lock(mu_);
  ++pin_calls_;
  if (incarnation != incarnation_) return StaleError("incarnation mismatch");
  const Region* region = nullptr;
  for (const Region& r : regions_) {
    if (addr >= r.addr && addr < r.addr + r.length) region = &r;
  }
  if (region == nullptr) return NotFoundError("no region at address");
  if (length > region->addr + region->length - addr) {
    return InvalidArgumentError("range leaves the region");
  }
  if (generation != region->generation) return StaleError("generation mismatch");
  if (region->closing) return StaleError("region is closing");
  if (!region->remote_accessible) return PermissionDeniedError("not remote-accessible");
  if (transport != region->transport) {
    return PermissionDeniedError("not registered for " + std::string(transport));
  }
  ++active_pins_;
  return AccessPin(&TestContext::ReleasePin, this, nullptr);
}

Result<RegionLease> TestContext::LeaseRemoteRegion(uint64_t addr, uint64_t length,
                                                   uint64_t incarnation, uint64_t generation,
                                                   std::string_view transport,
                                                   std::function<void()> on_revoke) {
  uint64_t region_addr = 0;
  uint64_t region_length = 0;
  bool closing = false;
  {
    // The same checks, in the same order; the pin it takes stands for nothing here.
    ASSIGN_OR_RETURN(AccessPin check,
                     PinRemoteAccess(addr, length, incarnation, generation, transport));
    MutexLock lock(mu_);
    --pin_calls_;
    for (const Region& r : regions_) {
      if (addr >= r.addr && addr < r.addr + r.length) {
        region_addr = r.addr;
        region_length = r.length;
        closing = r.closing;
      }
    }
  }
  MutexLock lock(mu_);
  for (const Region& r : regions_) {  // closed since the check: revoked at once, as CloseRegion
    if (r.addr == region_addr) closing = r.closing;
  }
  const uint64_t id = next_lease_++;
  auto& lease =
      leases_.emplace(id, Lease{region_addr, std::move(on_revoke), closing}).first->second;
  if (closing) lease.on_revoke();
  return RegionLease{AccessPin(&TestContext::ReleaseLease, this, reinterpret_cast<void*>(id)),
                     region_addr, region_length};
}

void TestContext::ReleaseLease(void* owner, void* token) {
  auto* self = static_cast<TestContext*>(owner);
  MutexLock lock(self->mu_);
  self->leases_.erase(reinterpret_cast<uint64_t>(token));
  self->cv_.NotifyAll();
}

int TestContext::RevokedLeasesLocked() {
  int n = 0;
  for (const auto& [id, lease] : leases_) n += lease.revoked ? 1 : 0;
  return n;
}

void TestContext::ReleasePin(void* owner, void* /*token*/) {
  auto* self = static_cast<TestContext*>(owner);
  MutexLock lock(self->mu_);
  --self->active_pins_;
  self->cv_.NotifyAll();
}

void TestContext::CompleteSlice(Slice* slice, const Status& status) {
  MutexLock lock(mu_);
  ++completions_;
  if (!done_.emplace(slice, status).second) ++duplicates_;
  if (waiters_ > 0) cv_.NotifyAll();
}

Result<std::string> TestContext::Exchange(const SegmentDesc& peer, std::string_view transport,
                                          std::string_view payload,
                                          std::chrono::milliseconds /*timeout*/) {
  Transport* target = nullptr;
  {
    MutexLock lock(mu_);
    auto it = peers_.find(peer.name);
    if (it != peers_.end()) target = it->second;
  }
  if (target == nullptr) return UnavailableError("no test peer '" + peer.name + "'");
  if (target->name() != transport) {
    return NotFoundError("test peer '" + peer.name + "' runs no '" + std::string(transport) + "'");
  }
  return target->OnExchange(payload);
}

bool TestContext::WaitAll(const std::vector<Slice*>& slices, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(mu_);
  ++waiters_;
  bool all = true;
  for (Slice* slice : slices) {
    while (done_.count(slice) == 0) {
      if (!cv_.WaitUntil(mu_, deadline) && std::chrono::steady_clock::now() >= deadline) {
        break;
      }
    }
    if (done_.count(slice) == 0) {
      all = false;
      break;
    }
  }
  --waiters_;
  return all;
}

Status TestContext::StatusOf(Slice* slice) {
  MutexLock lock(mu_);
  auto it = done_.find(slice);
  return it == done_.end() ? InternalError("not completed") : it->second;
}

void TestContext::Forget(const std::vector<Slice*>& slices) {
  MutexLock lock(mu_);
  for (Slice* slice : slices) done_.erase(slice);
}

bool TestContext::WaitNoPins(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  MutexLock lock(mu_);
  while (active_pins_ != 0 || RevokedLeasesLocked() != 0) {
    if (!cv_.WaitUntil(mu_, deadline) && std::chrono::steady_clock::now() >= deadline) break;
  }
  return active_pins_ == 0 && RevokedLeasesLocked() == 0;
}

int TestContext::active_pins() {
  MutexLock lock(mu_);
  return active_pins_;
}
int TestContext::active_leases() {
  MutexLock lock(mu_);
  return static_cast<int>(leases_.size());
}
uint64_t TestContext::pin_calls() {
  MutexLock lock(mu_);
  return pin_calls_;
}
uint64_t TestContext::completions() {
  MutexLock lock(mu_);
  return completions_;
}
uint64_t TestContext::duplicate_completions() {
  MutexLock lock(mu_);
  return duplicates_;
}

namespace {
// "[pos, +n)", how messages name a range of a backing.
std::string Range(size_t pos, size_t n) {
  return "[" + std::to_string(pos) + ", +" + std::to_string(n) + ")";
}
}  // namespace

std::unique_ptr<TargetBytes> TargetBytes::Memory(std::shared_ptr<uint8_t> memory, size_t length,
                                                 CopyFunction copy) {
  std::unique_ptr<TargetBytes> bytes(new TargetBytes());
  bytes->memory_ = std::move(memory);
  bytes->copy_ = std::move(copy);
  bytes->length_ = length;
  return bytes;
}

Result<std::unique_ptr<TargetBytes>> TargetBytes::File(const std::string& directory,
                                                       size_t length) {
  std::string path = directory + "/ferry-target-XXXXXX";
  const int fd = ::mkstemp(path.data());
  if (fd < 0) {
    return InternalError("cannot make a file in '" + directory + "': " + ErrnoText(errno));
  }
  std::unique_ptr<TargetBytes> bytes(new TargetBytes());
  bytes->path_ = path;
  bytes->fd_ = fd;
  bytes->length_ = length;
  if (::ftruncate(fd, static_cast<off_t>(length)) != 0) {
    return InternalError("cannot size '" + path + "' to " + std::to_string(length) +
                         " bytes: " + ErrnoText(errno));
  }
  return bytes;
}

TargetBytes::~TargetBytes() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
}

Result<std::vector<uint8_t>> TargetBytes::Read(size_t pos, size_t n) const {
  if (pos > length_ || n > length_ - pos) {
    return InvalidArgumentError(Range(pos, n) + " is outside the " + std::to_string(length_) +
                                "-byte backing");
  }
  std::vector<uint8_t> out(n);
  if (memory_ != nullptr) {
    if (n == 0) return out;
    if (!copy_) {
      std::memcpy(out.data(), memory_.get() + pos, n);
    } else {
      RETURN_IF_ERROR(copy_(out.data(), memory_.get() + pos, n)
                          .WithContext("copying " + Range(pos, n) + " out of the memory"));
    }
    return out;
  }
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd_, out.data() + done, n - done, static_cast<off_t>(pos + done));
    if (got <= 0) {
      return InternalError("pread of '" + path_ + "' at " + std::to_string(pos + done) + ": " +
                           (got == 0 ? std::string("end of file") : ErrnoText(errno)));
    }
    done += static_cast<size_t>(got);
  }
  return out;
}

Status TargetBytes::Write(size_t pos, const uint8_t* in, size_t n) {
  if (pos > length_ || n > length_ - pos) {
    return InvalidArgumentError(Range(pos, n) + " is outside the " + std::to_string(length_) +
                                "-byte backing");
  }
  if (memory_ != nullptr) {
    if (n == 0) return Status::Ok();
    if (!copy_) {
      std::memcpy(memory_.get() + pos, in, n);
      return Status::Ok();
    }
    return copy_(memory_.get() + pos, in, n)
        .WithContext("copying into " + Range(pos, n) + " of the memory");
  }
  size_t done = 0;
  while (done < n) {
    const ssize_t put = ::pwrite(fd_, in + done, n - done, static_cast<off_t>(pos + done));
    if (put <= 0) {
      return InternalError("pwrite of '" + path_ + "' at " + std::to_string(pos + done) + ": " +
                           (put == 0 ? std::string("nothing written") : ErrnoText(errno)));
    }
    done += static_cast<size_t>(put);
  }
  return Status::Ok();
}

Status TargetBytes::Set(size_t pos, uint8_t value, size_t n) {
  const std::vector<uint8_t> bytes(n, value);
  return Write(pos, bytes.data(), n);
}

Slice* SliceBatch::Add(const Slice& slice) {
  owned.push_back(std::make_unique<Slice>(slice));
  ptrs.push_back(owned.back().get());
  return owned.back().get();
}

}  // namespace ferry::transport_testing
