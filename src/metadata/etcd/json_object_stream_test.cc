// JsonObjectStream: object boundaries however the bytes are chunked, and garbage handling.
#include "metadata/etcd/json_object_stream.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ferry {
namespace {

std::vector<std::string> FeedAll(JsonObjectStream& stream, std::string_view text, size_t chunk,
                                 Status* status) {
  std::vector<std::string> out;
  *status = Status::Ok();
  for (size_t pos = 0; pos < text.size() && status->ok(); pos += chunk) {
    *status = stream.Feed(text.substr(pos, chunk), [&](std::string_view object) {
      out.emplace_back(object);
      return true;
    });
  }
  return out;
}

TEST(JsonObjectStreamTest, SplitsObjectsAcrossAnyChunking) {
  const std::string text =
      "{\"result\":{\"a\":\"}{\\\"\",\"b\":[{},{}]}}\n"
      "  {\"x\":\"\\\\\"}\r\n{\"y\":[\"]\"]}";
  const std::vector<std::string> want = {"{\"result\":{\"a\":\"}{\\\"\",\"b\":[{},{}]}}",
                                         "{\"x\":\"\\\\\"}", "{\"y\":[\"]\"]}"};
  for (size_t chunk : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, text.size()}) {
    JsonObjectStream stream(1024);
    Status s;
    EXPECT_EQ(FeedAll(stream, text, chunk, &s), want) << "chunk " << chunk;
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(stream.buffered(), 0u);
  }
}

TEST(JsonObjectStreamTest, KeepsPartialObjectUntilItCompletes) {
  JsonObjectStream stream(1024);
  Status s;
  EXPECT_TRUE(FeedAll(stream, "{\"a\":{\"b\"", 100, &s).empty());
  EXPECT_EQ(stream.buffered(), 9u);
  EXPECT_EQ(FeedAll(stream, ":1}}", 100, &s), std::vector<std::string>{"{\"a\":{\"b\":1}}"});
}

TEST(JsonObjectStreamTest, RejectsGarbageBetweenObjects) {
  JsonObjectStream stream(1024);
  Status s;
  EXPECT_EQ(FeedAll(stream, "{}garbage{}", 100, &s), std::vector<std::string>{"{}"});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  stream.Reset();
  EXPECT_EQ(FeedAll(stream, "{}", 100, &s), std::vector<std::string>{"{}"});
  EXPECT_TRUE(s.ok());
}

TEST(JsonObjectStreamTest, RejectsOversizedObject) {
  JsonObjectStream stream(64);
  Status s;
  EXPECT_TRUE(FeedAll(stream, "{\"a\":\"" + std::string(100, 'x'), 10, &s).empty());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
}

TEST(JsonObjectStreamTest, ConsumerCanStop) {
  JsonObjectStream stream(1024);
  int seen = 0;
  Status s = stream.Feed("{}{}{}", [&](std::string_view) { return ++seen < 2; });
  EXPECT_EQ(s.code(), StatusCode::kCanceled);
  EXPECT_EQ(seen, 2);
  s = stream.Feed("", [&](std::string_view) { return ++seen < 10; });
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(seen, 3);
}

}  // namespace
}  // namespace ferry
