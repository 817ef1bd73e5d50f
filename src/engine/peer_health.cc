#include "engine/peer_health.h"

#include <algorithm>
#include <optional>
#include <sstream>

#include "common/log.h"

namespace ferry::engine {

PeerHealth::State& PeerHealth::StateLocked(std::string_view peer) {
  auto it = peers_.find(peer);
  if (it != peers_.end()) return it->second;
  if (peers_.size() >= options_.max_peers) {
    for (auto h = peers_.begin(); h != peers_.end(); ++h) {
      if (!h->second.failing) {
        peers_.erase(h);
        break;
      }
    }
    if (peers_.size() >= options_.max_peers) peers_.erase(peers_.begin());
  }
  return peers_.emplace(std::string(peer), State{}).first->second;
}

void PeerHealth::ReportFailure(std::string_view peer, const Status& error) {
  std::optional<std::string> line;
  {
    MutexLock lock(mu_);
    ++failures_;
    State& s = StateLocked(peer);
    ++s.failures_total;
    const Clock::TimePoint now = clock_->Now();
    if (!s.failing) {
      s.failing = true;
      s.failures_since_line = 0;
      s.last_line = now;
      line = "transfers to '" + std::string(peer) + "' are failing: " + error.ToString();
    } else {
      ++s.failures_since_line;
      if (now - s.last_line >= options_.summary_every) {
        line = "transfers to '" + std::string(peer) + "' still failing: " +
               std::to_string(s.failures_since_line) + " more failures in the last " +
               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - s.last_line)
                                  .count()) +
               " s, latest: " + error.ToString();
        s.failures_since_line = 0;
        s.last_line = now;
      }
    }
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
    State& s = it->second;
    if (s.failing) {
      line = "transfers to '" + std::string(peer) + "' recovered after " +
             std::to_string(s.failures_total) + " failures";
      ++lines_;
    }
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
