#include "transport/shm/shm_peer.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "common/log.h"
#include "transport/samehost/grant_wire.h"

namespace ferry::shm {

RemoteMapping::~RemoteMapping() {
  if (::munmap(base_, length_) != 0) {
    FERRY_LOG(kWarn) << "shm munmap of a peer buffer: " << ErrnoText(errno);
  }
}

ShmPeer::ShmPeer(PeerAddress address, std::string name, size_t workers,
                 std::chrono::milliseconds timeout)
    : address_(std::move(address)),
      name_(std::move(name)),
      timeout_(timeout),
      connections_(workers) {}

Result<samehost::GrantConnection*> ShmPeer::Connection(size_t worker) {
  std::unique_ptr<samehost::GrantConnection>& slot = connections_[worker];
  if (slot != nullptr && !slot->broken()) return slot.get();
  slot.reset();
  Result<std::unique_ptr<samehost::GrantConnection>> conn =
      samehost::GrantConnection::Connect(address_.socket_path, timeout_);
  if (!conn.ok()) return conn.status().WithContext("shm peer " + name_);
  slot = std::move(conn).value();
  return slot.get();
}

void ShmPeer::DropConnection(size_t worker) { connections_[worker].reset(); }

Result<std::shared_ptr<RemoteMapping>> ShmPeer::Mapping(uint64_t incarnation, uint64_t buffer_id,
                                                        uint64_t min_length,
                                                        samehost::GrantConnection* conn,
                                                        bool* fetched) {
  *fetched = false;
  const auto key = std::make_pair(incarnation, buffer_id);
  {
    MutexLock lock(mu_);
    auto it = mappings_.find(key);
    if (it != mappings_.end() && it->second->length() >= min_length) return it->second;
  }
  // Fetched outside the lock: another worker may race us; the first one cached wins.
  ASSIGN_OR_RETURN(std::shared_ptr<RemoteMapping> made, FetchAndMap(buffer_id, min_length, conn));
  *fetched = true;
  MutexLock lock(mu_);
  auto [it, inserted] = mappings_.emplace(key, made);
  if (!inserted && it->second->length() < min_length) it->second = made;
  return it->second;
}

bool ShmPeer::DropMapping(uint64_t incarnation, uint64_t buffer_id) {
  MutexLock lock(mu_);
  return mappings_.erase(std::make_pair(incarnation, buffer_id)) > 0;
}

Result<std::shared_ptr<RemoteMapping>> ShmPeer::FetchAndMap(uint64_t buffer_id, uint64_t min_length,
                                                            samehost::GrantConnection* conn) {
  Result<int> received = conn->FetchFd(buffer_id, timeout_);
  if (!received.ok()) {
    return received.status().WithContext("shm peer " + name_ + ": fetch buffer " +
                                         std::to_string(buffer_id));
  }
  samehost::UniqueFd fd(*received);
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
  return std::make_shared<RemoteMapping>(static_cast<uint8_t*>(base), length);
}

}  // namespace ferry::shm
