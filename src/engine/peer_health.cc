#include "engine/peer_health.h"

#include <algorithm>
#include <optional>

#include "common/log.h"

namespace ferry::engine {

PeerHealth::State& PeerHealth::StateLocked(std::string_view peer) {
  auto it = peers_.find(peer);
  if (it != peers_.end()) return it->second;
  if (peers_.size() >= options_.max_peers) {
    for (auto h = peers_.begin(); h != peers_.end(); ++h) {
      if (!h->second.streak.failing()) {
        peers_.erase(h);
        break;
      }
    }
    if (peers_.size() >= options_.max_peers) peers_.erase(peers_.begin());
  }
  return peers_.emplace(std::string(peer), State{}).first->second;
}

namespace {

// "transfers to segment 'b' over tcp": the peer segment and, when one carried the failure, the
// transport.
std::string Subject(std::string_view peer, std::string_view transport = {}) {
  std::string subject = "transfers to segment '" + std::string(peer) + "'";
  if (!transport.empty()) subject += " over " + std::string(transport);
  return subject;
}

}  // namespace

void PeerHealth::ReportFailure(std::string_view peer, const Status& error,
                               std::string_view transport) {
  std::optional<std::string> line;
  {
    MutexLock lock(mu_);
    ++failures_;
    line = StateLocked(peer).streak.Failed(Subject(peer, transport), error.ToString(),
                                           clock_->Now(), options_.summary_every);
    if (line.has_value()) ++lines_;
  }
  if (line.has_value()) FERRY_LOG(kWarn) << *line;
}

void PeerHealth::ReportSuccess(std::string_view peer) {
  std::optional<std::string> line;
  {
    MutexLock lock(mu_);
    auto it = peers_.find(peer);
    if (it == peers_.end()) return;
    line = it->second.streak.Succeeded(Subject(peer), clock_->Now());
    if (line.has_value()) ++lines_;
    peers_.erase(it);
  }
  if (line.has_value()) FERRY_LOG(kInfo) << *line;
}

bool PeerHealth::AllowRefresh(std::string_view peer) {
  MutexLock lock(mu_);
  State& s = StateLocked(peer);
  const Clock::TimePoint now = clock_->Now();
  if (s.backoff.count() > 0 && now < s.next_refresh) return false;
  s.backoff = s.backoff.count() == 0 ? options_.min_backoff
                                     : std::min(s.backoff * 2, options_.max_backoff);
  s.next_refresh = now + s.backoff;
  return true;
}

void PeerHealth::Forget(std::string_view peer) {
  MutexLock lock(mu_);
  auto it = peers_.find(peer);
  if (it != peers_.end()) peers_.erase(it);
}

uint64_t PeerHealth::lines_logged() const {
  MutexLock lock(mu_);
  return lines_;
}

uint64_t PeerHealth::failures_seen() const {
  MutexLock lock(mu_);
  return failures_;
}

}  // namespace ferry::engine
