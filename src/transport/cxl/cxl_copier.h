// CxlCopier: how cxl moves the bytes of granted slices for one peer (samehost::PeerCopier): a
// memmove within this process's mapping of the shared window, from or to the window offset the
// peer's key names. The copy engine fences around it (cxl windows may be written with
// non-temporal stores). Per peer it keeps only the peer's endpoint, dropped with the link.
#pragma once

#include <memory>
#include <span>
#include <utility>

#include "transport/cxl/cxl_window.h"
#include "transport/cxl/cxl_wire.h"
#include "transport/samehost/copy_engine.h"

namespace ferry::cxl {

struct WindowState;

// Thread contract: thread-safe (immutable after construction).
class CxlCopier final : public samehost::PeerCopier {
 public:
  // `window` is this engine's mapping, kept alive by the copier; `peer` is what the peer
  // published (its window is the same one, Connect checked).
  CxlCopier(std::shared_ptr<WindowState> window, Endpoint peer)
      : window_(std::move(window)), peer_(std::move(peer)) {}

  // The local range lies in our mapping, the key decodes, and the remote range lies in the
  // key's region of the window: a bad plan never touches bytes outside the buffer it names.
  // The target's pin is the authoritative check. InvalidArgument otherwise.
  Status Check(const Slice& slice) override;
  void Copy(std::span<Slice* const> granted, std::span<Status> results) override;

 private:
  Result<uint64_t> RemoteOffset(const Slice& slice) const;

  const std::shared_ptr<WindowState> window_;
  const Endpoint peer_;
};

}  // namespace ferry::cxl
