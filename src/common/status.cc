#include "ferry/status.h"

namespace ferry {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "Ok";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kOverlap:
      return "Overlap";
    case StatusCode::kStale:
      return "Stale";
    case StatusCode::kAgain:
      return "Again";
    case StatusCode::kBusy:
      return "Busy";
    case StatusCode::kTimeout:
      return "Timeout";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kPermissionDenied:
      return "PermissionDenied";
    case StatusCode::kCanceled:
      return "Canceled";
    case StatusCode::kInternal:
      return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  std::string out(StatusCodeName(code_));
  if (!message_.empty()) {
    out += ": ";
    out += message_;
  }
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string message(context);
  message += ": ";
  message += message_;
  return Status(code_, std::move(message));
}

std::ostream& operator<<(std::ostream& os, const Status& status) { return os << status.ToString(); }

}  // namespace ferry
