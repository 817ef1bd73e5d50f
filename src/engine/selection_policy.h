// SelectionPolicy (DESIGN.md, Selection): which transports may carry a request, best first.
//
// Given the covering remote BufferDesc, keep the transports both sides registered it with (a
// memory buffer never those that carry file buffers; a file buffer those, first, then the ones
// that reach it through its owner: tcp, which the owner registers file buffers with); drop
// same-host-only ones when the peer is on another host; order by priority
// cuda-ipc > cxl > shm > rdma/fabric > tcp; skip links in failure cool-down; an explicit hint
// narrows the choice to that transport. Whether a file transport reaches the file from here
// (Transport::Reaches) the engine decides afterwards (data_path.cc, TransportsFor).
//
// Thread contract: thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/mutex.h"
#include "core/buffer_desc.h"

namespace ferry::engine {

struct Candidate {
  std::string name;
  bool same_host_only = false;
  // Carries file buffers (TransportCapabilities::file_buffers) and only those: it is a
  // candidate only for buffers with BufferDesc::file, and goes before the others there.
  bool file_buffers = false;
};

class SelectionPolicy {
 public:
  explicit SelectionPolicy(Clock* clock,
                           std::chrono::milliseconds cool_down = std::chrono::seconds(5))
      : clock_(clock), cool_down_(cool_down) {}

  // Priority of a transport name; lower is better; unknown names go last.
  static int Priority(std::string_view transport);

  // `installed`: the local transports. `hint`: empty or one transport name.
  std::vector<std::string> Order(const BufferDesc& remote, const std::vector<Candidate>& installed,
                                 bool same_host, std::string_view peer,
                                 std::string_view hint = {}) const;

  // A link to `peer` over `transport` failed: avoid it for the cool-down (unless it is the
  // only choice).
  void ReportFailure(std::string_view transport, std::string_view peer);
  void ReportSuccess(std::string_view transport, std::string_view peer);

 private:
  Clock* const clock_;
  const std::chrono::milliseconds cool_down_;
  mutable Mutex mu_;
  std::map<std::string, Clock::TimePoint, std::less<>> cooling_ GUARDED_BY(mu_);  // "t|peer"
};

}  // namespace ferry::engine
