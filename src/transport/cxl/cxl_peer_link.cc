#include "transport/cxl/cxl_peer_link.h"

#include <utility>

namespace ferry::cxl {

std::unique_ptr<samehost::GrantConnection> CxlPeerLink::TakeIdleConnection() {
  MutexLock lock(mu_);
  while (!idle_.empty()) {
    std::unique_ptr<samehost::GrantConnection> connection = std::move(idle_.back());
    idle_.pop_back();
    if (!connection->broken()) return connection;
  }
  return nullptr;
}

Result<std::unique_ptr<samehost::GrantConnection>> CxlPeerLink::OpenConnection(
    std::chrono::milliseconds timeout) {
  Result<std::unique_ptr<samehost::GrantConnection>> connection =
      samehost::GrantConnection::Connect(peer_.grant_path, timeout);
  if (!connection.ok()) {
    return connection.status().WithContext(peer_name_ + " cxl grant channel");
  }
  return connection;
}

void CxlPeerLink::ReturnConnection(std::unique_ptr<samehost::GrantConnection> connection) {
  if (connection == nullptr || connection->broken()) return;
  MutexLock lock(mu_);
  if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(connection));
}

}  // namespace ferry::cxl
