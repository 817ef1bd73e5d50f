#include "common/wire_status.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

namespace ferry {
namespace {

// The protocol's numbers, pinned: reordering or inserting into StatusCode must not move them.
const std::vector<std::pair<StatusCode, uint8_t>>& Pinned() {
  static const std::vector<std::pair<StatusCode, uint8_t>> pinned = {
      {StatusCode::kOk, 0},
      {StatusCode::kInvalidArgument, 1},
      {StatusCode::kNotFound, 2},
      {StatusCode::kAlreadyExists, 3},
      {StatusCode::kOverlap, 4},
      {StatusCode::kStale, 5},
      {StatusCode::kAgain, 6},
      {StatusCode::kBusy, 7},
      {StatusCode::kTimeout, 8},
      {StatusCode::kUnavailable, 9},
      {StatusCode::kPermissionDenied, 10},
      {StatusCode::kCanceled, 11},
      {StatusCode::kInternal, 12},
  };
  return pinned;
}

TEST(WireStatusTest, EveryCodeHasItsPinnedNumberBothWays) {
  for (const auto& [code, wire] : Pinned()) {
    SCOPED_TRACE(StatusCodeName(code));
    EXPECT_EQ(StatusCodeToWire(code), wire);
    ASSERT_TRUE(StatusCodeFromWire(wire).has_value());
    EXPECT_EQ(*StatusCodeFromWire(wire), code);
  }
}

TEST(WireStatusTest, EveryStatusCodeIsOnTheWireAndPinned) {
  // Every enumerator StatusCodeName knows (any underlying value) must be pinned above, so a new
  // code cannot reach a wire with a number nobody fixed.
  std::set<StatusCode> pinned;
  for (const auto& [code, wire] : Pinned()) pinned.insert(code);
  for (int raw = 0; raw < 256; ++raw) {
    const auto code = static_cast<StatusCode>(raw);
    if (StatusCodeName(code) == "Unknown") continue;
    SCOPED_TRACE(StatusCodeName(code));
    EXPECT_EQ(pinned.count(code), 1u) << "StatusCode without a pinned wire number";
  }
}

TEST(WireStatusTest, UnknownNumbersAreRefusedAndBadCodesSentAsInternal) {
  for (int wire = 13; wire < 256; ++wire) {
    EXPECT_FALSE(StatusCodeFromWire(static_cast<uint8_t>(wire)).has_value()) << wire;
  }
  EXPECT_EQ(StatusCodeToWire(static_cast<StatusCode>(200)), 12);
}

}  // namespace
}  // namespace ferry
