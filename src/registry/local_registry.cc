#include "registry/local_registry.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "common/log.h"
#include "registry/region_index.h"

namespace ferry {
using registry_internal::Region;

namespace {

std::string Range(uint64_t addr, uint64_t length) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "[0x%" PRIx64 ", 0x%" PRIx64 ")", addr, addr + length);
  return buf;
}

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%" PRIx64, v);
  return buf;
}

}  // namespace

// ---- PinGuard -------------------------------------------------------------------------------

PinGuard::PinGuard(PinGuard&& other) noexcept
    : registry_(std::exchange(other.registry_, nullptr)),
      region_(std::exchange(other.region_, nullptr)) {}

PinGuard& PinGuard::operator=(PinGuard&& other) noexcept {
  if (this != &other) {
    Release();
    registry_ = std::exchange(other.registry_, nullptr);
    region_ = std::exchange(other.region_, nullptr);
  }
  return *this;
}

void PinGuard::Release() {
  if (region_ == nullptr) return;
  registry_->ReleasePin(std::exchange(region_, nullptr));
  registry_ = nullptr;
}

uint64_t PinGuard::region_addr() const { return region_->addr; }
uint64_t PinGuard::region_length() const { return region_->length; }
uint64_t PinGuard::generation() const { return region_->generation; }
Location PinGuard::location() const { return region_->location; }
bool PinGuard::is_file() const { return region_ != nullptr && region_->file.has_value(); }

void PinGuard::RetainBound(std::vector<std::string>* transports) const {
  if (region_ == nullptr) {
    transports->clear();
    return;
  }
  ReaderLock lock(registry_->mu_);  // bindings change only under the exclusive lock
  std::erase_if(*transports, [&](const std::string& name) {
    return std::none_of(region_->bindings.begin(), region_->bindings.end(),
                        [&](const TransportBinding& b) { return b.transport == name; });
  });
}

// ---- LocalRegistry --------------------------------------------------------------------------

LocalRegistry::LocalRegistry(RegistryOptions options) : options_(options) {}

LocalRegistry::~LocalRegistry() {
  WriterLock lock(mu_);
  for (size_t i = 0; i < index_.size(); ++i) {
    const Region& region = *index_.at(i);
    if (region.pins() != 0) {
      FERRY_LOG(kError) << "bug: LocalRegistry destroyed with " << region.pins()
                        << " pin(s) held on " << Range(region.addr, region.length);
    }
  }
}

Status LocalRegistry::ValidateSpec(const RegionSpec& spec) const {
  if (spec.addr == 0) return InvalidArgumentError("cannot register a null address");
  if (spec.length == 0) {
    return InvalidArgumentError("cannot register zero bytes at " + Hex(spec.addr));
  }
  if (spec.addr + spec.length < spec.addr) {
    return InvalidArgumentError("range at " + Hex(spec.addr) + " of " +
                                std::to_string(spec.length) + " bytes wraps around");
  }
  if (spec.binding.transport.empty()) {
    return InvalidArgumentError("registration of " + Range(spec.addr, spec.length) +
                                " names no transport");
  }
  if (spec.location.kind == Location::Kind::kDetect) {
    return InvalidArgumentError("location '*' must be resolved before registering " +
                                Range(spec.addr, spec.length));
  }
  return Status::Ok();
}

namespace {

// A registration for another transport must describe the memory the same way.
Status CheckAgrees(const RegionSpec& spec, const Location& location, bool remote_accessible) {
  if (location == spec.location && remote_accessible == spec.remote_accessible) return Status::Ok();
  return InvalidArgumentError(Range(spec.addr, spec.length) + " is registered as " +
                              location.ToString() +
                              (remote_accessible ? " remote-accessible" : " local-only") +
                              "; a registration for another transport must agree");
}

Status OverlapBetween(const RegionSpec& spec, uint64_t addr, uint64_t length) {
  return OverlapError("range " + Range(spec.addr, spec.length) + " overlaps registered range " +
                      Range(addr, length));
}

}  // namespace

Status LocalRegistry::PlaceLocked(const RegionSpec& spec, Region** join) const {
  *join = nullptr;
  Region* floor = index_.Floor(spec.addr);
  if (floor != nullptr && floor->addr == spec.addr && floor->length == spec.length) {
    if (floor->unregistering || floor->closing()) {
      return BusyError(Range(spec.addr, spec.length) +
                       " is being unregistered; register it again after that returns");
    }
    if (floor->FindBinding(spec.binding.transport) != nullptr) {
      return AlreadyExistsError(Range(spec.addr, spec.length) + " is already registered for '" +
                                spec.binding.transport + "'");
    }
    RETURN_IF_ERROR(CheckAgrees(spec, floor->location, floor->remote_accessible));
    *join = floor;
    return Status::Ok();
  }
  if (floor != nullptr && floor->end() > spec.addr) {
    return OverlapBetween(spec, floor->addr, floor->length);
  }
  const size_t next = index_.LowerBound(spec.addr);
  if (next < index_.size() && index_.at(next)->addr < spec.addr + spec.length) {
    return OverlapBetween(spec, index_.at(next)->addr, index_.at(next)->length);
  }
  return Status::Ok();
}

Result<std::vector<uint64_t>> LocalRegistry::RegisterAll(const std::vector<RegionSpec>& specs,
                                                         bool batch) {
  auto where = [batch](size_t i) {
    return batch ? "batch entry " + std::to_string(i) + " (nothing registered)" : std::string();
  };
  auto fail = [&](const Status& s, size_t i) { return batch ? s.WithContext(where(i)) : s; };
  for (size_t i = 0; i < specs.size(); ++i) {
    Status s = ValidateSpec(specs[i]);
    if (!s.ok()) return fail(s, i);
  }
  // Plan in address order: each spec either joins an existing region, joins the new region of
  // the spec before it (same range, another transport), or makes a new region.
  std::vector<size_t> order(specs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return specs[a].addr != specs[b].addr ? specs[a].addr < specs[b].addr
                                          : specs[a].length < specs[b].length;
  });
  constexpr size_t kNone = ~size_t{0};
  struct Step {
    Region* existing = nullptr;  // joins this registered region
    size_t fresh = kNone;        // or the new region with this index
  };
  std::vector<Step> steps(specs.size());
  std::vector<size_t> fresh_first;  // spec that creates each new region, in address order

  WriterLock lock(mu_);
  const RegionSpec* last = nullptr;
  std::vector<std::string_view> last_transports;
  for (size_t i : order) {
    const RegionSpec& spec = specs[i];
    if (last != nullptr && spec.addr == last->addr && spec.length == last->length) {
      const Step& group = steps[static_cast<size_t>(last - specs.data())];
      const bool taken = std::find(last_transports.begin(), last_transports.end(),
                                   spec.binding.transport) != last_transports.end();
      if (taken) {
        return fail(AlreadyExistsError(Range(spec.addr, spec.length) + " is registered for '" +
                                       spec.binding.transport + "' twice"),
                    i);
      }
      Status agree = CheckAgrees(spec, last->location, last->remote_accessible);
      if (!agree.ok()) return fail(agree, i);
      last_transports.push_back(spec.binding.transport);
      steps[i] = group;
      continue;
    }
    if (last != nullptr && last->addr + last->length > spec.addr) {
      return fail(OverlapBetween(spec, last->addr, last->length), i);
    }
    Region* existing = nullptr;
    Status placed = PlaceLocked(spec, &existing);
    if (!placed.ok()) return fail(placed, i);
    last = &spec;
    last_transports.assign(1, spec.binding.transport);
    if (existing != nullptr) {
      for (const TransportBinding& b : existing->bindings) last_transports.push_back(b.transport);
      steps[i].existing = existing;
    } else {
      steps[i].fresh = fresh_first.size();
      fresh_first.push_back(i);
    }
  }

  if (const size_t held = index_.size(); fresh_first.size() > options_.max_regions - held) {
    const std::string setting = options_.max_regions_setting.empty()
                                    ? std::string()
                                    : " (" + std::string(options_.max_regions_setting) + ")";
    return InvalidArgumentError(
        std::to_string(fresh_first.size()) + " new regions would bring the registry to " +
        std::to_string(held + fresh_first.size()) + ", over the limit of " +
        std::to_string(options_.max_regions) + setting + "; nothing registered");
  }

  // Apply. Nothing below can fail.
  std::vector<std::unique_ptr<Region>> fresh;
  fresh.reserve(fresh_first.size());
  for (size_t i : fresh_first) {
    auto region = std::make_unique<Region>();
    region->addr = specs[i].addr;
    region->length = specs[i].length;
    region->location = specs[i].location;
    region->remote_accessible = specs[i].remote_accessible;
    region->file = specs[i].file;
    region->generation = next_generation_++;
    fresh.push_back(std::move(region));
  }
  std::vector<uint64_t> generations(specs.size());
  for (size_t i : order) {
    Region* region = steps[i].existing != nullptr ? steps[i].existing : fresh[steps[i].fresh].get();
    region->bindings.push_back(specs[i].binding);
    generations[i] = region->generation;
  }
  index_.InsertMany(std::move(fresh));
  return generations;
}

Result<uint64_t> LocalRegistry::Register(const RegionSpec& spec) {
  ASSIGN_OR_RETURN(std::vector<uint64_t> generations, RegisterAll({spec}, /*batch=*/false));
  return generations.front();
}

Result<std::vector<uint64_t>> LocalRegistry::RegisterBatch(const std::vector<RegionSpec>& specs) {
  return RegisterAll(specs, /*batch=*/true);
}

Region* LocalRegistry::BeginUnregisterLocked(uint64_t addr, Status* error) {
  Region* region = index_.Find(addr);
  if (region == nullptr) {
    std::string message = "no registered region starts at " + Hex(addr);
    if (const Region* inside = index_.Containing(addr)) {
      message += " (it lies inside " + Range(inside->addr, inside->length) + ")";
    }
    *error = NotFoundError(std::move(message));
    return nullptr;
  }
  if (region->unregistering) {
    *error = BusyError(Range(region->addr, region->length) +
                       " is already being unregistered by another call");
    return nullptr;
  }
  region->unregistering = true;
  region->state.fetch_or(Region::kClosing, std::memory_order_acq_rel);
  return region;
}

bool LocalRegistry::WaitDrained(Region* region, std::chrono::steady_clock::time_point deadline) {
  MutexLock lock(drain_mu_);
  while (region->pins() != 0) {
    if (!drain_cv_.WaitUntil(drain_mu_, deadline) && std::chrono::steady_clock::now() >= deadline) {
      return region->pins() == 0;
    }
  }
  return true;
}

Status LocalRegistry::AbandonUnregister(Region* region) {
  WriterLock lock(mu_);
  region->unregistering = false;  // stays closing: new pins keep being refused
  return TimeoutError(Range(region->addr, region->length) + " still has " +
                      std::to_string(region->pins()) +
                      " access(es) in flight or transport lease(s) held after " +
                      std::to_string(options_.drain_timeout.count()) +
                      " ms; it stays registered and closing. Do not free the memory: fail the "
                      "in-flight work and call unregister again");
}

Status LocalRegistry::RunUnregisterCallbacks(Region* region, std::string_view transport) {
  // Drained and closing: no pin can be taken, and `unregistering` keeps other calls off the
  // bindings, so they may be read without the lock while callbacks run.
  Status first_error;
  for (const TransportBinding& b : region->bindings) {
    if (!transport.empty() && b.transport != transport) continue;
    if (!b.on_unregister) continue;
    Status s = b.on_unregister();
    if (s.ok()) continue;
    FERRY_LOG(kError) << "unregistering " << Range(region->addr, region->length) << " from '"
                      << b.transport << "' failed: " << s;
    if (first_error.ok()) first_error = s.WithContext("transport '" + b.transport + "'");
  }
  return first_error;
}

bool LocalRegistry::RemoveBindingLocked(Region* region, std::string_view transport) {
  std::erase_if(region->bindings, [&](const TransportBinding& b) {
    return transport.empty() || b.transport == transport;
  });
  if (region->bindings.empty()) return true;  // the caller erases it from the index
  region->unregistering = false;
  region->state.fetch_and(~Region::kClosing, std::memory_order_acq_rel);  // reopen
  return false;
}

Status LocalRegistry::Unregister(uint64_t addr) { return Unregister(addr, std::string_view()); }

Status LocalRegistry::Unregister(uint64_t addr, std::string_view transport) {
  Region* region = nullptr;
  {
    WriterLock lock(mu_);
    const Region* found = index_.Find(addr);
    if (!transport.empty() && found != nullptr && found->FindBinding(transport) == nullptr) {
      return NotFoundError(Range(addr, found->length) + " is not registered for '" +
                           std::string(transport) + "'");
    }
    Status error;
    region = BeginUnregisterLocked(addr, &error);
    if (region == nullptr) return error;
  }
  Revoke(region);
  const auto deadline = std::chrono::steady_clock::now() + options_.drain_timeout;
  if (!WaitDrained(region, deadline)) return AbandonUnregister(region);
  Status result = RunUnregisterCallbacks(region, transport);
  WriterLock lock(mu_);
  if (RemoveBindingLocked(region, transport)) index_.Erase(addr);
  return result;
}

Status LocalRegistry::UnregisterBatch(const std::vector<uint64_t>& addrs) {
  std::vector<Region*> regions;
  {
    WriterLock lock(mu_);
    // Validate everything before marking anything, so a bad entry changes nothing.
    std::vector<uint64_t> sorted = addrs;
    std::sort(sorted.begin(), sorted.end());
    auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    if (dup != sorted.end()) {
      return InvalidArgumentError("unregister batch names " + Hex(*dup) +
                                  " twice (nothing unregistered)");
    }
    for (size_t i = 0; i < addrs.size(); ++i) {
      const Region* region = index_.Find(addrs[i]);
      if (region == nullptr || region->unregistering) {
        Status error;
        BeginUnregisterLocked(addrs[i], &error);  // fails, and says why
        return error.WithContext("batch entry " + std::to_string(i) + " (nothing unregistered)");
      }
    }
    for (uint64_t addr : addrs) {
      Status unused;
      regions.push_back(BeginUnregisterLocked(addr, &unused));
    }
  }
  for (Region* region : regions) Revoke(region);
  const auto deadline = std::chrono::steady_clock::now() + options_.drain_timeout;
  Status first_error;
  size_t timed_out = 0;
  std::vector<Region*> drained;
  for (Region* region : regions) {
    if (WaitDrained(region, deadline)) {
      Status s = RunUnregisterCallbacks(region, {});
      if (!s.ok() && first_error.ok()) first_error = s;
      drained.push_back(region);
    } else {
      Status s = AbandonUnregister(region);
      if (first_error.ok()) first_error = s;
      ++timed_out;
    }
  }
  {
    WriterLock lock(mu_);
    std::vector<uint64_t> erase;
    for (Region* region : drained) {
      if (RemoveBindingLocked(region, {})) erase.push_back(region->addr);
    }
    index_.EraseMany(std::move(erase));
  }
  if (timed_out > 0) {
    return first_error.WithContext(std::to_string(timed_out) + " of " +
                                   std::to_string(regions.size()) + " regions did not drain");
  }
  return first_error;
}

Result<PinGuard> LocalRegistry::Pin(uint64_t addr, uint64_t length, const PinCheck& check) {
  ReaderLock lock(mu_);
  Region* region = index_.Containing(addr);
  if (region == nullptr) return NotFoundError("no registered region contains " + Hex(addr));
  if (length > region->end() - addr) {
    return InvalidArgumentError("access " + Range(addr, length) + " leaves registered region " +
                                Range(region->addr, region->length));
  }
  if (region->closing()) {
    return StaleError("region " + Range(region->addr, region->length) + " is being unregistered");
  }
  if (check.generation != 0 && check.generation != region->generation) {
    return StaleError("region " + Range(region->addr, region->length) + " is generation " +
                      std::to_string(region->generation) + ", access planned against " +
                      std::to_string(check.generation));
  }
  if (check.require_remote_accessible && !region->remote_accessible) {
    return PermissionDeniedError("region " + Range(region->addr, region->length) +
                                 " is not remote-accessible");
  }
  if (!check.transport.empty() && region->FindBinding(check.transport) == nullptr) {
    return PermissionDeniedError("region " + Range(region->addr, region->length) +
                                 " is not registered for '" + std::string(check.transport) + "'");
  }
  // closing cannot be set while the shared lock is held, so the check above still stands.
  region->state.fetch_add(1, std::memory_order_acq_rel);
  return PinGuard(this, region);
}

void LocalRegistry::ReleasePin(Region* region) {
  const uint64_t before = region->state.fetch_sub(1, std::memory_order_acq_rel);
  // `region` may be freed from here on, once the unregistering thread sees zero pins.
  if (before == (Region::kClosing | 1)) {
    MutexLock lock(drain_mu_);
    drain_cv_.NotifyAll();
  }
}

void LocalRegistry::ReleaseDetachedPin(void* registry, void* token) {
  static_cast<LocalRegistry*>(registry)->ReleasePin(static_cast<Region*>(token));
}

Result<LocalRegistry::RevocablePin> LocalRegistry::PinRevocable(uint64_t addr, uint64_t length,
                                                                const PinCheck& check,
                                                                std::function<void()> on_revoke) {
  ASSIGN_OR_RETURN(PinGuard pin, Pin(addr, length, check));
  auto revoker = std::make_unique<registry_internal::Revoker>();
  revoker->region = static_cast<Region*>(pin.Detach());
  revoker->on_revoke = std::move(on_revoke);
  RevocablePin out{revoker.get(), revoker->region->addr, revoker->region->length};
  {
    MutexLock lock(revoke_mu_);
    // The region may have started closing since Pin (its Unregister then waits for this pin):
    // tell the holder at once, as Revoke would have.
    if (revoker->region->closing()) {
      revoker->revoked = true;
      revoker->on_revoke();
    }
    revoker->region->revokers.push_back(revoker.get());
  }
  (void)revoker.release();  // owned by the token until ReleaseRevocablePin
  return out;
}

void LocalRegistry::ReleaseRevocablePin(void* registry, void* token) {
  auto* self = static_cast<LocalRegistry*>(registry);
  std::unique_ptr<registry_internal::Revoker> revoker(
      static_cast<registry_internal::Revoker*>(token));
  Region* region = revoker->region;
  {
    MutexLock lock(self->revoke_mu_);
    std::erase(region->revokers, revoker.get());
  }
  self->ReleasePin(region);
}

void LocalRegistry::Revoke(Region* region) {
  // The region is closing and pinned by every revoker listed, so it stays alive meanwhile.
  MutexLock lock(revoke_mu_);
  for (registry_internal::Revoker* r : region->revokers) {
    if (r->revoked) continue;
    r->revoked = true;
    r->on_revoke();
  }
}

Status LocalRegistry::CheckOverlap(uint64_t addr, uint64_t length) const {
  if (length == 0 || addr + length < addr) {
    return InvalidArgumentError("bad range at " + Hex(addr) + " of " + std::to_string(length) +
                                " bytes");
  }
  ReaderLock lock(mu_);
  const Region* floor = index_.Floor(addr);
  if (floor != nullptr && floor->end() > addr) {
    return OverlapError("range " + Range(addr, length) + " overlaps registered range " +
                        Range(floor->addr, floor->length));
  }
  const size_t next = index_.LowerBound(addr);
  if (next < index_.size() && index_.at(next)->addr < addr + length) {
    return OverlapError("range " + Range(addr, length) + " overlaps registered range " +
                        Range(index_.at(next)->addr, index_.at(next)->length));
  }
  return Status::Ok();
}

BufferDesc LocalRegistry::Describe(const Region& region) {
  BufferDesc desc;
  desc.addr = region.addr;
  desc.length = region.length;
  desc.location = region.location;
  desc.generation = region.generation;
  desc.remote_accessible = region.remote_accessible;
  desc.file = region.file;
  // A local-only region publishes no key: peers must not learn what would reach it (an RDMA
  // rkey, a shared buffer's id). Its bindings stay, for its local use and its unregister.
  if (!region.remote_accessible) return desc;
  for (const TransportBinding& b : region.bindings) desc.keys.emplace(b.transport, b.key);
  return desc;
}

Result<BufferDesc> LocalRegistry::Lookup(uint64_t addr) const {
  ReaderLock lock(mu_);
  const Region* region = index_.Containing(addr);
  if (region == nullptr || region->closing()) {
    return NotFoundError("no open registered region contains " + Hex(addr));
  }
  return Describe(*region);
}

bool LocalRegistry::IsDeviceMemory(uint64_t addr) const {
  ReaderLock lock(mu_);
  const Region* region = index_.Containing(addr);
  return region != nullptr && region->location.is_device();
}

std::vector<BufferDesc> LocalRegistry::Snapshot() const {
  ReaderLock lock(mu_);
  std::vector<BufferDesc> out;
  out.reserve(index_.size());
  for (size_t i = 0; i < index_.size(); ++i) {
    if (!index_.at(i)->closing()) out.push_back(Describe(*index_.at(i)));
  }
  return out;
}

size_t LocalRegistry::size() const {
  ReaderLock lock(mu_);
  return index_.size();
}

}  // namespace ferry
