#include "transport/shm/shm_copier.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "common/log.h"
#include "common/unique_fd.h"
#include "transport/shm/shm_cma.h"

namespace ferry::shm {

RemoteMapping::RemoteMapping(uint8_t* base, size_t length, std::shared_ptr<ShmCounters> counters)
    : base_(base), length_(length), counters_(std::move(counters)) {
  counters_->mappings_alive.fetch_add(1, std::memory_order_relaxed);
}

RemoteMapping::~RemoteMapping() {
  if (::munmap(base_, length_) != 0) {
    FERRY_LOG(kWarn) << "shm munmap of a peer buffer: " << ErrnoText(errno);
  }
  counters_->mappings_alive.fetch_sub(1, std::memory_order_relaxed);
}

ShmCopier::ShmCopier(PeerAddress address, std::string name, std::shared_ptr<ShmCounters> counters)
    : address_(std::move(address)), name_(std::move(name)), counters_(std::move(counters)) {}

Status ShmCopier::Check(const Slice& slice) {
  Result<BufferKey> key = DecodeBufferKey(slice.remote_key);
  if (!key.ok()) return key.status().WithContext("shm peer " + name_);
  if (key->mapped) return key->OffsetOf(slice.remote_addr, slice.length).status();
  return Status::Ok();
}

Status ShmCopier::CheckPeer(const samehost::GrantConnection& connection) {
  if (connection.peer_pid() == address_.pid) return Status::Ok();
  return PermissionDeniedError("shm peer " + name_ + ": its grant socket " + address_.socket_path +
                               " is answered by pid " + std::to_string(connection.peer_pid()) +
                               ", not by pid " + std::to_string(address_.pid) +
                               " that it publishes; refusing to copy into either");
}

std::shared_ptr<RemoteMapping> ShmCopier::Find(const MappingKey& key, uint64_t min_length) {
  MutexLock lock(mu_);
  auto it = mappings_.find(key);
  if (it != mappings_.end() && it->second->length() >= min_length) return it->second;
  return nullptr;
}

void ShmCopier::PrepareCopies(std::span<Slice* const> granted,
                              samehost::GrantConnection& connection, samehost::Deadline deadline) {
  for (const Slice* s : granted) {
    if (connection.broken()) return;
    Result<BufferKey> key = DecodeBufferKey(s->remote_key);  // Check passed: it decodes
    if (!key.ok() || !key->mapped) continue;
    const MappingKey where{s->peer_incarnation, key->buffer_id};
    if (Find(where, key->buffer_length) != nullptr) continue;
    // Fetched outside the lock: another worker may race us; the last one cached wins, and
    // both mappings are of the same file.
    Result<std::shared_ptr<RemoteMapping>> made =
        FetchAndMap(key->buffer_id, key->buffer_length, connection, deadline);
    if (!made.ok()) {
      FERRY_LOG(kDebug) << made.status() << "; copying with process_vm_* instead";
      continue;
    }
    counters_->fd_fetches.fetch_add(1, std::memory_order_relaxed);
    MutexLock lock(mu_);
    mappings_[where] = std::move(made).value();
  }
}

void ShmCopier::Copy(std::span<Slice* const> granted, std::span<Status> results) {
  std::vector<CmaCopy> copies[2];  // indexed by OpCode
  std::vector<size_t> owners[2];
  for (size_t k = 0; k < granted.size(); ++k) {
    const Slice& s = *granted[k];
    Result<BufferKey> key = DecodeBufferKey(s.remote_key);
    std::shared_ptr<RemoteMapping> mapping;
    uint64_t offset = 0;
    if (key.ok() && key->mapped) {
      Result<uint64_t> at = key->OffsetOf(s.remote_addr, s.length);
      if (at.ok()) {
        offset = *at;
        mapping = Find({s.peer_incarnation, key->buffer_id}, key->buffer_length);
      }
    }
    if (mapping != nullptr) {
      uint8_t* remote = mapping->base() + offset;
      auto* local = reinterpret_cast<uint8_t*>(s.local_addr);
      if (s.op == OpCode::kWrite) {
        std::memcpy(remote, local, s.length);
      } else {
        std::memcpy(local, remote, s.length);
      }
      counters_->mapped_slices.fetch_add(1, std::memory_order_relaxed);
      results[k] = Status::Ok();
      continue;
    }
    const auto op = static_cast<size_t>(s.op);
    copies[op].push_back({s.local_addr, s.remote_addr, s.length});
    owners[op].push_back(k);
  }
  for (OpCode op : {OpCode::kWrite, OpCode::kRead}) {
    const auto o = static_cast<size_t>(op);
    if (copies[o].empty()) continue;
    std::vector<Status> done = CmaTransfer(address_.pid, op, copies[o]);
    for (size_t i = 0; i < done.size(); ++i) {
      if (done[i].ok()) counters_->cma_slices.fetch_add(1, std::memory_order_relaxed);
      results[owners[o][i]] = std::move(done[i]);
    }
  }
}

void ShmCopier::Refused(const Slice& slice, const Status& answer) {
  if (answer.code() != StatusCode::kStale && answer.code() != StatusCode::kNotFound) return;
  Result<BufferKey> key = DecodeBufferKey(slice.remote_key);
  if (!key.ok() || !key->mapped) return;
  std::shared_ptr<RemoteMapping> dropped;  // unmapped outside the lock
  MutexLock lock(mu_);
  auto it = mappings_.find({slice.peer_incarnation, key->buffer_id});
  if (it == mappings_.end()) return;
  dropped = std::move(it->second);
  mappings_.erase(it);
  counters_->mappings_dropped.fetch_add(1, std::memory_order_relaxed);
}

Result<std::shared_ptr<RemoteMapping>> ShmCopier::FetchAndMap(uint64_t buffer_id,
                                                              uint64_t min_length,
                                                              samehost::GrantConnection& connection,
                                                              samehost::Deadline deadline) {
  Result<int> received = connection.FetchFd(buffer_id, deadline);
  if (!received.ok()) {
    return received.status().WithContext("shm peer " + name_ + ": fetch buffer " +
                                         std::to_string(buffer_id));
  }
  UniqueFd fd(*received);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return UnavailableError("shm fstat of peer buffer: " + ErrnoText(errno));
  }
  const auto length = static_cast<uint64_t>(st.st_size);
  if (length < min_length || length == 0) {
    return InvalidArgumentError("shm peer " + name_ + ": buffer " + std::to_string(buffer_id) +
                                " holds " + std::to_string(length) + " bytes, the key says " +
                                std::to_string(min_length));
  }
  void* base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) {
    return UnavailableError("shm mmap of peer buffer " + std::to_string(buffer_id) + ": " +
                            ErrnoText(errno));
  }
  return std::make_shared<RemoteMapping>(static_cast<uint8_t*>(base), length, counters_);
}

}  // namespace ferry::shm
