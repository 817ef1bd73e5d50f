#include "transport/cuda_ipc/cuda_ipc_wire.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ferry::cuda_ipc {
namespace {

RegionKey SampleKey() {
  RegionKey key;
  for (size_t i = 0; i < key.handle.size(); ++i) key.handle[i] = static_cast<uint8_t>(i * 7);
  for (size_t i = 0; i < key.device_uuid.size(); ++i)
    key.device_uuid[i] = static_cast<uint8_t>(255 - i);
  key.alloc_base = 1u << 20;
  key.alloc_size = 8u << 20;
  key.region_addr = (1u << 20) + 4096;
  key.region_length = 1u << 20;
  return key;
}

TEST(CudaIpcWireTest, EndpointRoundTripsAndRejectsMalformed) {
  const Endpoint e{1234, 0x0123456789abcdefULL, "/dev/shm/ferry-grant.sock"};
  EXPECT_EQ("v1:1234:0123456789abcdef:/dev/shm/ferry-grant.sock", EncodeEndpoint(e));
  Result<Endpoint> back = DecodeEndpoint(EncodeEndpoint(e));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(e, *back);
  const std::string t = "0123456789abcdef";
  for (const std::string& bad : std::vector<std::string>{
           std::string(), std::string("v1:"), "v1:0:" + t + ":/x", "v1:12:" + t + ":relative",
           "v2:12:" + t + ":/x", "v1:012:" + t + ":/x", "v1:12:" + t + ":/a\nb",
           "v1:99999999999:" + t + ":/x", std::string("v1:12:/x"), "v1:12:" + t + "/x",
           "v1:12:" + t.substr(1) + ":/x", std::string("v1:12:0123456789ABCDEF:/x"),
           "v1:12:" + t + ":"}) {
    EXPECT_EQ(StatusCode::kInvalidArgument, DecodeEndpoint(bad).status().code()) << bad;
  }
}

TEST(CudaIpcWireTest, KeyRoundTripsAndBoundsRanges) {
  const RegionKey key = SampleKey();
  const std::string text = EncodeKey(key);
  Result<RegionKey> back = DecodeKey(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(key, *back);
  // Inside the region: the offset within the allocation.
  Result<uint64_t> at = key.OffsetOf(key.region_addr + 10, 100);
  ASSERT_TRUE(at.ok());
  EXPECT_EQ(4096u + 10u, *at);
  EXPECT_TRUE(key.OffsetOf(key.region_addr + key.region_length, 0).ok());
  // Outside it, even by a byte, or wrapping.
  EXPECT_FALSE(key.OffsetOf(key.region_addr - 1, 1).ok());
  EXPECT_FALSE(key.OffsetOf(key.region_addr + key.region_length - 10, 11).ok());
  EXPECT_FALSE(key.OffsetOf(key.region_addr + 1, UINT64_MAX).ok());
  EXPECT_FALSE(key.OffsetOf(UINT64_MAX, 2).ok());
}

TEST(CudaIpcWireTest, MalformedKeysAreRefused) {
  const std::string good = EncodeKey(SampleKey());
  std::vector<std::string> bad = {"", "v1:", good.substr(0, good.size() - 1) + "x", good + ":1",
                                  "v2" + good.substr(2)};
  std::string upper = good;
  upper[3] = 'A';  // hex is lower case only
  bad.push_back(upper);
  // A region leaving its allocation.
  RegionKey outside = SampleKey();
  outside.region_length = outside.alloc_size;
  bad.push_back(EncodeKey(outside));
  RegionKey before = SampleKey();
  before.region_addr = before.alloc_base - 1;
  bad.push_back(EncodeKey(before));
  RegionKey wraps = SampleKey();
  wraps.alloc_base = UINT64_MAX - 10;
  wraps.region_addr = wraps.alloc_base;
  bad.push_back(EncodeKey(wraps));
  for (const std::string& text : bad) {
    EXPECT_EQ(StatusCode::kInvalidArgument, DecodeKey(text).status().code()) << text;
  }
}

}  // namespace
}  // namespace ferry::cuda_ipc
