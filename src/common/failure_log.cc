#include "common/failure_log.h"

#include <cstdio>

namespace ferry {
namespace {

// Seconds with one decimal: "2.5".
std::string Seconds(Clock::TimePoint::duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", std::chrono::duration<double>(d).count());
  return text;
}

}  // namespace

std::optional<std::string> FailureStreak::Failed(std::string_view subject,
                                                  std::string_view detail, Clock::TimePoint now,
                                                  std::chrono::milliseconds summary_every) {
  ++total_;
  if (!failing_) {
    failing_ = true;
    since_line_ = 0;
    began_ = now;
    last_line_ = now;
    return std::string(subject) + " failing: " + std::string(detail);
  }
  ++since_line_;
  if (now - last_line_ < summary_every) return std::nullopt;
  std::string line = std::string(subject) + " still failing: " + std::to_string(since_line_) +
                     " more failures in the last " + Seconds(now - last_line_) +
                     " s; latest: " + std::string(detail);
  since_line_ = 0;
  last_line_ = now;
  return line;
}

std::optional<std::string> FailureStreak::Succeeded(std::string_view subject,
                                                    Clock::TimePoint now) {
  if (!failing_) return std::nullopt;
  std::string line = std::string(subject) + " recovered after " + std::to_string(total_) +
                     (total_ == 1 ? " failure" : " failures") + " in " + Seconds(now - began_) +
                     " s";
  *this = FailureStreak{};
  return line;
}

FailureLog::FailureLog(std::string subject, LogLevel level, Clock* clock,
                       std::chrono::milliseconds summary_every)
    : subject_(std::move(subject)),
      level_(level),
      clock_(clock != nullptr ? clock : Clock::Real()),
      summary_every_(summary_every) {}

void FailureLog::Failed(std::string_view detail) {
  std::optional<std::string> line;
  {
    MutexLock lock(mu_);
    line = streak_.Failed(subject_, detail, clock_->Now(), summary_every_);
    if (line.has_value()) ++lines_;
  }
  if (line.has_value()) Write(level_, *line);
}

void FailureLog::Succeeded() {
  std::optional<std::string> line;
  {
    MutexLock lock(mu_);
    line = streak_.Succeeded(subject_, clock_->Now());
    if (line.has_value()) ++lines_;
  }
  if (line.has_value()) Write(LogLevel::kInfo, *line);
}

bool FailureLog::failing() const {
  MutexLock lock(mu_);
  return streak_.failing();
}

uint64_t FailureLog::lines() const {
  MutexLock lock(mu_);
  return lines_;
}

void FailureLog::Write(LogLevel level, const std::string& line) {
  switch (level) {
    case LogLevel::kTrace:
      FERRY_LOG(kTrace) << line;
      break;
    case LogLevel::kDebug:
      FERRY_LOG(kDebug) << line;
      break;
    case LogLevel::kInfo:
      FERRY_LOG(kInfo) << line;
      break;
    case LogLevel::kWarn:
      FERRY_LOG(kWarn) << line;
      break;
    case LogLevel::kError:
      FERRY_LOG(kError) << line;
      break;
    case LogLevel::kOff:
      break;
  }
}

}  // namespace ferry
