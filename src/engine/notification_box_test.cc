#include "engine/notification_box.h"

#include <gtest/gtest.h>

namespace ferry::engine {
namespace {

TEST(NotificationBoxTest, CapsByCountAndBytesThenAcceptsAgainOnceTaken) {
  NotificationBox box(3, 100);
  EXPECT_TRUE(box.Push({"a", std::string(10, 'x')}).ok());
  EXPECT_TRUE(box.Push({"b", std::string(10, 'y')}).ok());
  EXPECT_TRUE(box.Push({"c", "z"}).ok());
  EXPECT_EQ(box.Push({"d", "w"}).code(), StatusCode::kBusy);  // count
  std::vector<NotifyMessage> got = box.TakeAll();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].name, "a");
  EXPECT_EQ(got[2].payload, "z");
  EXPECT_EQ(box.bytes(), 0u);
  EXPECT_EQ(box.Push({"e", std::string(100, 'q')}).code(), StatusCode::kBusy);  // bytes
  EXPECT_TRUE(box.Push({"e", std::string(60, 'q')}).ok());
  EXPECT_EQ(box.Push({"f", std::string(60, 'q')}).code(), StatusCode::kBusy);
  EXPECT_EQ(box.count(), 1u);
  EXPECT_EQ(box.refused(), 3u);
}

}  // namespace
}  // namespace ferry::engine
