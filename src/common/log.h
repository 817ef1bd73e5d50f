// The one log facade (STYLE.md 7). Lines go to stderr as one write each:
//   <ISO time> <level> <file>:<line>] message
// Usage: FERRY_LOG(kWarn) << "connect to " << peer << " failed: " << ErrnoText(errno);
// The stream is not evaluated when the level is off, so trace logging is free when disabled.
#pragma once

#include <atomic>
#include <sstream>
#include <string>
#include <string_view>

namespace ferry {

enum class LogLevel : int { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

// Current threshold, one per process. Starts from FERRY_LOG_LEVEL (trace|debug|info|warn|error|
// off), default warn; an engine's EngineOptions::log_level, when set, replaces it at init().
// Levels by volume (STYLE.md 7): the data path (per slice, per task) never logs at info or
// below; a failing peer is logged at warn, boundedly (engine/peer_health.h), naming the peer
// segment and the transport.
LogLevel GetLogLevel();
void SetLogLevel(LogLevel level);
// Parses "trace".."off"; returns false and leaves `out` alone on anything else.
bool ParseLogLevel(std::string_view text, LogLevel* out);

// strerror_r text for an errno value, e.g. "Connection refused (errno 111)".
std::string ErrnoText(int err);

namespace log_internal {

extern std::atomic<int> g_level;

// Builds one line; writes it when destroyed. Thread-compatible: one per statement.
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

inline bool Enabled(LogLevel level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

}  // namespace log_internal
}  // namespace ferry

// A `for` that runs at most once keeps the macro safe inside an unbraced if/else.
#define FERRY_LOG(level)                                                              \
  for (bool ferry_log_on_ = ::ferry::log_internal::Enabled(::ferry::LogLevel::level); \
       ferry_log_on_; ferry_log_on_ = false)                                          \
  ::ferry::log_internal::LogMessage(::ferry::LogLevel::level, __FILE__, __LINE__).stream()
