// The one table of status codes on ferry's wires (STYLE.md 17): every protocol that carries a
// StatusCode — rpc error responses, tcp data responses, grant channel replies, rdma access-check
// replies — sends the number this table gives, never the enum's in-memory value, so reordering
// or extending StatusCode cannot silently change a protocol. The values are fixed forever:
//
//    0 Ok                1 InvalidArgument   2 NotFound          3 AlreadyExists
//    4 Overlap           5 Stale             6 Again             7 Busy
//    8 Timeout           9 Unavailable      10 PermissionDenied 11 Canceled
//   12 Internal
//
// A new StatusCode gets the next free number here (wire_status_test pins every value; the switch
// in wire_status.cc does not compile without a case for it). Each wire keeps its own rule for a
// number this build does not know (a bad frame, or Internal with the peer's message).
//
// Thread contract: pure functions.
#pragma once

#include <cstdint>
#include <optional>

#include "ferry/status.h"

namespace ferry {

// The wire number of `code`. A value outside StatusCode (a bug) is sent as Internal's.
uint8_t StatusCodeToWire(StatusCode code);

// The code a wire number stands for; nullopt for a number this build does not know.
std::optional<StatusCode> StatusCodeFromWire(uint8_t wire);

}  // namespace ferry
