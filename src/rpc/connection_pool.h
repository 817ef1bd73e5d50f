// ConnectionPool: the RPC client's idle connections, a few per peer, reused LIFO. A connection
// is only ever in the pool while no call uses it, and one is handed out only when it is still
// quiet (nothing to read, no hang-up: a late or stray response means it is out of step) and was
// idle for less than `idle_timeout` (kept below the server's idle timeout, so the server does not
// close it under a new request).
//
// Thread contract: thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "rpc/socket_io.h"

namespace ferry::rpc {

class ConnectionPool {
 public:
  ConnectionPool(size_t max_idle_per_peer, std::chrono::milliseconds idle_timeout)
      : max_idle_per_peer_(max_idle_per_peer), idle_timeout_(idle_timeout) {}
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // A usable idle connection to `peer`, or an invalid fd when there is none. Connections found
  // unusable on the way are closed.
  UniqueFd Take(const std::string& peer, Deadline now);

  // Returns a connection whose last call completed cleanly; closed instead when `peer` already
  // has max_idle_per_peer idle ones.
  void Give(const std::string& peer, UniqueFd fd, Deadline now);

  // Closes every idle connection.
  void Clear();
  // Closes the idle connections to `peer`.
  void Clear(const std::string& peer);
  // Closes the idle connections older than idle_timeout (they would not be reused).
  void Prune(Deadline now);

  // Idle connections held, all peers together.
  size_t idle_count() const;

 private:
  struct Idle {
    UniqueFd fd;
    Deadline since;
  };

  const size_t max_idle_per_peer_;
  const std::chrono::milliseconds idle_timeout_;
  mutable Mutex mu_;
  std::map<std::string, std::vector<Idle>> idle_ GUARDED_BY(mu_);
};

}  // namespace ferry::rpc
