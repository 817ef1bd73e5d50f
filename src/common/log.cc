#include "common/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <ctime>

#include "common/env.h"

namespace ferry {
namespace log_internal {
namespace {

int InitialLevel() {
  LogLevel level = LogLevel::kWarn;
  if (auto text = GetFerryEnv("LOG_LEVEL")) ParseLogLevel(*text, &level);
  return static_cast<int>(level);
}

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "T";
    case LogLevel::kDebug:
      return "D";
    case LogLevel::kInfo:
      return "I";
    case LogLevel::kWarn:
      return "W";
    case LogLevel::kError:
      return "E";
    case LogLevel::kOff:
      break;
  }
  return "?";
}

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

}  // namespace

std::atomic<int> g_level{InitialLevel()};

LogMessage::LogMessage(LogLevel level, const char* file, int line) {
  timeval tv{};
  gettimeofday(&tv, nullptr);
  tm parts{};
  gmtime_r(&tv.tv_sec, &parts);
  char stamp[64];
  std::snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", parts.tm_year + 1900,
                parts.tm_mon + 1, parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec,
                static_cast<long>(tv.tv_usec));
  stream_ << stamp << ' ' << LevelName(level) << ' ' << Basename(file) << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string line = stream_.str();
  // One write per line keeps lines from different threads whole; a short write is ignored
  // rather than retried, since logging must never block the caller for long.
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace log_internal

LogLevel GetLogLevel() {
  return static_cast<LogLevel>(log_internal::g_level.load(std::memory_order_relaxed));
}

void SetLogLevel(LogLevel level) {
  log_internal::g_level.store(static_cast<int>(level), std::memory_order_relaxed);
}

bool ParseLogLevel(std::string_view text, LogLevel* out) {
  static constexpr std::pair<std::string_view, LogLevel> kNames[] = {
      {"trace", LogLevel::kTrace}, {"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo},
      {"warn", LogLevel::kWarn},   {"error", LogLevel::kError}, {"off", LogLevel::kOff}};
  for (const auto& [name, level] : kNames) {
    if (text == name) {
      *out = level;
      return true;
    }
  }
  return false;
}

std::string ErrnoText(int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer (which may not be `buf`).
  const char* text = strerror_r(err, buf, sizeof(buf));
  return std::string(text) + " (errno " + std::to_string(err) + ")";
}

}  // namespace ferry
