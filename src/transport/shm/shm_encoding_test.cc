// The shm published bytes and buffer keys: round trips and strict rejection.
#include "transport/shm/shm_encoding.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ferry::shm {
namespace {

TEST(ShmEncodingTest, PeerAddressRoundTrips) {
  const PeerAddress address{4242, "/dev/shm/ferry-shm-4242-00ff.sock"};
  const std::string text = EncodePeerAddress(address);
  EXPECT_EQ(text, "v1:4242:/dev/shm/ferry-shm-4242-00ff.sock");
  Result<PeerAddress> back = DecodePeerAddress(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, address);
}

TEST(ShmEncodingTest, MalformedPeerAddressesAreInvalidArgument) {
  const std::string long_path = "/" + std::string(108, 'p');
  for (const std::string& bad : std::vector<std::string>{
           "", "v1", "v1:", "v2:1:/a", "v1::/a", "v1:0:/a", "v1:012:/a", "v1:-1:/a", "v1:+1:/a",
           "v1:2147483648:/a", "v1:99999999999999999999999:/a", "v1:12", "v1:12:", "v1:12:rel/path",
           "v1:12:/a\nb", "v1:1x:/a", std::string("v1:12:/a\0b", 10), "v1:12:" + long_path}) {
    Result<PeerAddress> r = DecodePeerAddress(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << "'" << bad << "'";
  }
  EXPECT_TRUE(DecodePeerAddress("v1:2147483647:/x:y").ok());  // a colon in the path is fine
}

TEST(ShmEncodingTest, BufferKeysRoundTrip) {
  EXPECT_EQ(EncodeBufferKey({}), "cma");
  Result<BufferKey> cma = DecodeBufferKey("cma");
  ASSERT_TRUE(cma.ok());
  EXPECT_FALSE(cma->mapped);
  const BufferKey mapped{true, 7, 4096, 1 << 20, 0x7f0000001000};
  const std::string text = EncodeBufferKey(mapped);
  EXPECT_EQ(text, "mapped:7:4096:1048576:139637976731648");
  Result<BufferKey> back = DecodeBufferKey(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, mapped);
}

TEST(ShmEncodingTest, MalformedKeysAreInvalidArgument) {
  for (const std::string& bad : std::vector<std::string>{
           "", "CMA", "cma ", "mapped", "mapped:", "mapped:1:2:3", "mapped:1:2:3:4:5",
           "mapped:1:0:0:4", "mapped:1:5:5:4", "mapped:01:0:8:4", "mapped:1:0:8:-4",
           "mapped:a:0:8:4", "mapped:1:0:8:18446744073709551616", "mapped::0:8:4"}) {
    EXPECT_EQ(DecodeBufferKey(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(ShmEncodingTest, OffsetOfKeepsRangesInsideTheBuffer) {
  const BufferKey key{true, 1, 100, 1000, 5000};  // region at 5000 is byte 100 of the buffer
  EXPECT_EQ(key.OffsetOf(5000, 900).value_or(0), 100u);
  EXPECT_EQ(key.OffsetOf(5010, 10).value_or(0), 110u);
  EXPECT_FALSE(key.OffsetOf(4999, 1).ok());    // before the region
  EXPECT_FALSE(key.OffsetOf(5000, 901).ok());  // past the buffer
  EXPECT_FALSE(key.OffsetOf(5900, 1).ok());
  EXPECT_FALSE(key.OffsetOf(5001, UINT64_MAX).ok());  // no wrap-around
  EXPECT_FALSE(key.OffsetOf(UINT64_MAX, 1).ok());
}

}  // namespace
}  // namespace ferry::shm
