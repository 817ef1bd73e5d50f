#include "common/log.h"

#include <gtest/gtest.h>

#include <cerrno>

#include "ferry/status.h"

namespace ferry {
namespace {

TEST(LogTest, ParsesEveryLevelAndRejectsOthers) {
  LogLevel level = LogLevel::kOff;
  EXPECT_TRUE(ParseLogLevel("trace", &level));
  EXPECT_EQ(level, LogLevel::kTrace);
  EXPECT_TRUE(ParseLogLevel("error", &level));
  EXPECT_EQ(level, LogLevel::kError);
  EXPECT_FALSE(ParseLogLevel("verbose", &level));
  EXPECT_EQ(level, LogLevel::kError);  // untouched on failure
}

TEST(LogTest, DisabledLevelDoesNotEvaluateTheStream) {
  const LogLevel saved = GetLogLevel();
  SetLogLevel(LogLevel::kError);
  int evaluated = 0;
  FERRY_LOG(kDebug) << (++evaluated);
  EXPECT_EQ(evaluated, 0);
  testing::internal::CaptureStderr();
  FERRY_LOG(kError) << "boom " << (++evaluated);
  const std::string line = testing::internal::GetCapturedStderr();
  EXPECT_EQ(evaluated, 1);
  EXPECT_NE(line.find(" E log_test.cc:"), std::string::npos) << line;
  EXPECT_NE(line.find("] boom 1\n"), std::string::npos) << line;
  SetLogLevel(saved);
}

TEST(LogTest, ErrnoTextNamesTheError) {
  EXPECT_NE(ErrnoText(ECONNREFUSED).find("(errno 111)"), std::string::npos);
}

Status FailsWith(StatusCode code) { return Status(code, "inner"); }
Result<int> Value(bool ok) {
  if (!ok) return NotFoundError("no value");
  return 42;
}
Status UsesMacros(bool ok, int* out) {
  RETURN_IF_ERROR(Status::Ok());
  ASSIGN_OR_RETURN(int v, Value(ok));
  *out = v;
  RETURN_IF_ERROR(Value(true));
  return Status::Ok();
}

TEST(StatusTest, MacrosPropagateErrorsAndAssignValues) {
  int out = 0;
  EXPECT_TRUE(UsesMacros(true, &out).ok());
  EXPECT_EQ(out, 42);
  out = 0;
  Status s = UsesMacros(false, &out);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(out, 0);  // output parameters are written only on success
}

TEST(StatusTest, ToStringAndContext) {
  EXPECT_EQ(Status().ToString(), "Ok");
  Status s = FailsWith(StatusCode::kStale).WithContext("open segment x");
  EXPECT_EQ(s.ToString(), "Stale: open segment x: inner");
  EXPECT_TRUE(Status().WithContext("ignored").ok());
}

TEST(StatusTest, ResultFromOkStatusIsAnInternalError) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_EQ(r.value_or(7), 7);
}

TEST(StatusTest, ResultHoldsMoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
}

}  // namespace
}  // namespace ferry
