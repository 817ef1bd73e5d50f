// Status and Result<T>: errors are values (STYLE.md 1).
//
// A Status is a code from a small closed set plus a message; detail goes in the message, never
// in a new code. Result<T> holds either a T or a non-OK Status. Both are [[nodiscard]]:
// dropping one is a compile warning. Neither throws.
//
//   Result<Location> loc = Location::Parse(text);
//   if (!loc.ok()) return loc.status();
//
//   RETURN_IF_ERROR(registry.Register(spec));
//   ASSIGN_OR_RETURN(auto desc, DecodeSegmentDesc(bytes));
//
// Thread contract: value types; distinct objects may be used from distinct threads freely.
#pragma once

#include <cassert>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace ferry {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,   // the caller's input is malformed or out of range
  kNotFound,          // asked, and the thing does not exist
  kAlreadyExists,     // the exact thing is already there
  kOverlap,           // a memory range partially overlaps a registered one
  kStale,             // planned against an old incarnation/generation; refresh and retry once
  kAgain,             // back-pressure: a queue or pool is full, try again later
  kBusy,              // the object is in a state that forbids this now (e.g. closing)
  kTimeout,           // a bounded wait ran out
  kUnavailable,       // could not ask: peer, store or device unreachable
  kPermissionDenied,  // the OS or the peer refused access
  kCanceled,          // stopped on request
  kInternal,          // a broken invariant inside ferry; a bug
};

// "Ok", "InvalidArgument", ... (stable names, used in logs and JSON).
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  // OK.
  Status() noexcept = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "InvalidArgument: bad location 'gpu:1' (accepted: ...)", or "Ok".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(std::string_view context) const;

  // Marks a Status as deliberately dropped.
  void IgnoreError() const {}

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

std::ostream& operator<<(std::ostream& os, const Status& status);

inline Status InvalidArgumentError(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExistsError(std::string m) {
  return {StatusCode::kAlreadyExists, std::move(m)};
}
inline Status OverlapError(std::string m) { return {StatusCode::kOverlap, std::move(m)}; }
inline Status StaleError(std::string m) { return {StatusCode::kStale, std::move(m)}; }
inline Status AgainError(std::string m) { return {StatusCode::kAgain, std::move(m)}; }
inline Status BusyError(std::string m) { return {StatusCode::kBusy, std::move(m)}; }
inline Status TimeoutError(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status PermissionDeniedError(std::string m) {
  return {StatusCode::kPermissionDenied, std::move(m)};
}
inline Status CanceledError(std::string m) { return {StatusCode::kCanceled, std::move(m)}; }
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a T or a non-OK Status. Accessing the value of an error Result is a bug (asserted in
// debug builds; in release it is undefined, as with std::optional::operator*).
template <typename T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::decay_t<T>, Status>, "Result<Status> makes no sense");
  static_assert(!std::is_reference_v<T>, "Result<T&> is not supported; use Result<T*>");

 public:
  // An error. Passing an OK status is a bug; it becomes kInternal so it cannot pass as a value.
  Result(Status status) : rep_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(rep_).ok()) {
      rep_ = Status(StatusCode::kInternal, "Result constructed from an OK Status without a value");
    }
  }
  // A value.
  template <typename U = T,
            typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                        !std::is_same_v<std::decay_t<U>, Status> &&
                                        !std::is_same_v<std::decay_t<U>, Result<T>>>>
  Result(U&& value) : rep_(std::in_place_index<1>, std::forward<U>(value)) {}  // NOLINT

  bool ok() const { return rep_.index() == 1; }

  // The error, or OK when this holds a value.
  Status status() const { return ok() ? Status() : std::get<0>(rep_); }

  T& value() & {
    assert(ok());
    return *std::get_if<1>(&rep_);
  }
  const T& value() const& {
    assert(ok());
    return *std::get_if<1>(&rep_);
  }
  T&& value() && {
    assert(ok());
    return std::move(*std::get_if<1>(&rep_));
  }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // The value, or `fallback` on error.
  template <typename U>
  T value_or(U&& fallback) const& {
    return ok() ? value() : static_cast<T>(std::forward<U>(fallback));
  }

 private:
  std::variant<Status, T> rep_;
};

namespace status_internal {
inline const Status& AsStatus(const Status& s) { return s; }
template <typename T>
Status AsStatus(const Result<T>& r) {
  return r.status();
}
}  // namespace status_internal

}  // namespace ferry

#define FERRY_STATUS_CONCAT_INNER(a, b) a##b
#define FERRY_STATUS_CONCAT(a, b) FERRY_STATUS_CONCAT_INNER(a, b)

// Evaluates `expr` (a Status or a Result<T>) once; returns its error from the enclosing function.
#define RETURN_IF_ERROR(expr)                                                                  \
  do {                                                                                         \
    auto&& ferry_status_tmp_ = (expr);                                                         \
    if (!ferry_status_tmp_.ok()) return ::ferry::status_internal::AsStatus(ferry_status_tmp_); \
  } while (false)

// ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (a Result<T>) once; on error returns its Status,
// otherwise moves the value into `lhs`, which may be a declaration ("auto x").
#define ASSIGN_OR_RETURN(lhs, expr) \
  FERRY_ASSIGN_OR_RETURN_IMPL(FERRY_STATUS_CONCAT(ferry_result_, __COUNTER__), lhs, expr)
#define FERRY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
