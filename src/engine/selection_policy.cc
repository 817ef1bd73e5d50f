#include "engine/selection_policy.h"

#include <algorithm>
#include <utility>

namespace ferry::engine {

int SelectionPolicy::Priority(std::string_view transport) {
  static constexpr std::string_view kOrder[] = {"cuda-ipc", "cxl", "shm", "rdma", "fabric", "tcp"};
  for (size_t i = 0; i < std::size(kOrder); ++i) {
    if (kOrder[i] == transport) return static_cast<int>(i);
  }
  return static_cast<int>(std::size(kOrder));
}

std::vector<std::string> SelectionPolicy::Order(const BufferDesc& remote,
                                                const std::vector<Candidate>& installed,
                                                bool same_host, std::string_view peer,
                                                std::string_view hint) const {
  std::vector<std::pair<bool, std::string>> ranked;  // (not a file transport, name)
  for (const Candidate& c : installed) {
    if (!hint.empty() && c.name != hint) continue;
    if (remote.keys.find(c.name) == remote.keys.end()) continue;  // peer did not register it
    // A file transport carries file buffers only. A file buffer goes to a file transport, or
    // through its owner over a transport the owner registered it with (tcp).
    if (c.file_buffers && !remote.file.has_value()) continue;
    if (c.same_host_only && !same_host) continue;
    ranked.emplace_back(!c.file_buffers, c.name);
  }
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
    if (a.first != b.first) return !a.first;  // a file transport first: it reads the file here
    return Priority(a.second) < Priority(b.second);
  });
  std::vector<std::string> usable;
  for (auto& [not_file, name] : ranked) usable.push_back(std::move(name));
  // Links in cool-down go after the healthy ones (still usable as a last resort).
  std::vector<std::string> healthy;
  std::vector<std::string> cooling;
  const auto now = clock_->Now();
  MutexLock lock(mu_);
  for (std::string& t : usable) {
    auto it = cooling_.find(t + "|" + std::string(peer));
    (it == cooling_.end() || it->second <= now ? healthy : cooling).push_back(std::move(t));
  }
  healthy.insert(healthy.end(), std::make_move_iterator(cooling.begin()),
                 std::make_move_iterator(cooling.end()));
  return healthy;
}

void SelectionPolicy::ReportFailure(std::string_view transport, std::string_view peer) {
  MutexLock lock(mu_);
  cooling_[std::string(transport) + "|" + std::string(peer)] = clock_->Now() + cool_down_;
}

void SelectionPolicy::ReportSuccess(std::string_view transport, std::string_view peer) {
  MutexLock lock(mu_);
  if (auto it = cooling_.find(std::string(transport) + "|" + std::string(peer));
      it != cooling_.end()) {
    cooling_.erase(it);
  }
}

}  // namespace ferry::engine
