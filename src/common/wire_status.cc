#include "common/wire_status.h"

namespace ferry {

uint8_t StatusCodeToWire(StatusCode code) {
  // Written out, not cast: the enum's order is not the protocol's.
  switch (code) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kInvalidArgument:
      return 1;
    case StatusCode::kNotFound:
      return 2;
    case StatusCode::kAlreadyExists:
      return 3;
    case StatusCode::kOverlap:
      return 4;
    case StatusCode::kStale:
      return 5;
    case StatusCode::kAgain:
      return 6;
    case StatusCode::kBusy:
      return 7;
    case StatusCode::kTimeout:
      return 8;
    case StatusCode::kUnavailable:
      return 9;
    case StatusCode::kPermissionDenied:
      return 10;
    case StatusCode::kCanceled:
      return 11;
    case StatusCode::kInternal:
      return 12;
  }
  return 12;  // not a StatusCode: a bug, sent as Internal
}

std::optional<StatusCode> StatusCodeFromWire(uint8_t wire) {
  switch (wire) {
    case 0:
      return StatusCode::kOk;
    case 1:
      return StatusCode::kInvalidArgument;
    case 2:
      return StatusCode::kNotFound;
    case 3:
      return StatusCode::kAlreadyExists;
    case 4:
      return StatusCode::kOverlap;
    case 5:
      return StatusCode::kStale;
    case 6:
      return StatusCode::kAgain;
    case 7:
      return StatusCode::kBusy;
    case 8:
      return StatusCode::kTimeout;
    case 9:
      return StatusCode::kUnavailable;
    case 10:
      return StatusCode::kPermissionDenied;
    case 11:
      return StatusCode::kCanceled;
    case 12:
      return StatusCode::kInternal;
    default:
      return std::nullopt;
  }
}

}  // namespace ferry
