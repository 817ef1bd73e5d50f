// PeerInfo: who sent an RPC request, as the server's handlers see it.
#pragma once

#include <cstdint>

#include "common/host_port.h"

namespace ferry {

// A value type describing the connection a request arrived on.
struct PeerInfo {
  HostPort address;            // the peer's numeric address and source port
  uint64_t connection_id = 0;  // unique per accepted connection within one server
};

}  // namespace ferry
