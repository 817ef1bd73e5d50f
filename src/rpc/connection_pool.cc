#include "rpc/connection_pool.h"

#include <iterator>

namespace ferry::rpc {

UniqueFd ConnectionPool::Take(const std::string& peer, Deadline now) {
  std::vector<Idle> unusable;  // closed after the lock is released
  UniqueFd out;
  {
    MutexLock lock(mu_);
    auto it = idle_.find(peer);
    if (it == idle_.end()) return out;
    std::vector<Idle>& list = it->second;
    while (!list.empty() && !out.valid()) {
      Idle idle = std::move(list.back());
      list.pop_back();
      if (now - idle.since < idle_timeout_ && !HasPendingInputOrError(idle.fd.get())) {
        out = std::move(idle.fd);
      } else {
        unusable.push_back(std::move(idle));
      }
    }
    if (list.empty()) idle_.erase(it);
  }
  return out;
}

void ConnectionPool::Give(const std::string& peer, UniqueFd fd, Deadline now) {
  MutexLock lock(mu_);
  std::vector<Idle>& list = idle_[peer];
  if (list.size() >= max_idle_per_peer_) return;  // `fd` closes here
  list.push_back(Idle{std::move(fd), now});
}

void ConnectionPool::Clear() {
  std::map<std::string, std::vector<Idle>> closing;
  MutexLock lock(mu_);
  closing.swap(idle_);
}

void ConnectionPool::Clear(const std::string& peer) {
  std::vector<Idle> closing;
  MutexLock lock(mu_);
  auto it = idle_.find(peer);
  if (it == idle_.end()) return;
  closing.swap(it->second);
  idle_.erase(it);
}

void ConnectionPool::Prune(Deadline now) {
  std::vector<Idle> closing;
  MutexLock lock(mu_);
  for (auto it = idle_.begin(); it != idle_.end();) {
    std::vector<Idle>& list = it->second;
    for (auto c = list.begin(); c != list.end();) {
      if (now - c->since > idle_timeout_) {
        closing.push_back(std::move(*c));
        c = list.erase(c);
      } else {
        ++c;
      }
    }
    it = list.empty() ? idle_.erase(it) : std::next(it);
  }
}

size_t ConnectionPool::idle_count() const {
  MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [peer, list] : idle_) n += list.size();
  return n;
}

}  // namespace ferry::rpc
