#include "rpc/messages.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace ferry {
namespace {

// Every strict prefix and every one-byte extension of `packed` must be rejected.
template <typename Unpack>
void ExpectStrict(const std::string& packed, Unpack unpack) {
  for (size_t len = 0; len < packed.size(); ++len) {
    auto r = unpack(packed.substr(0, len));
    EXPECT_FALSE(r.ok()) << "prefix of " << len << " bytes accepted";
    if (!r.ok()) EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
  auto trailing = unpack(packed + "x");
  EXPECT_FALSE(trailing.ok()) << "trailing byte accepted";
  if (!trailing.ok()) EXPECT_EQ(trailing.status().code(), StatusCode::kInvalidArgument);
}

TEST(MessagesTest, TypesAreWireConstants) {
  EXPECT_EQ(ToWire(RpcType::kGetSegmentDesc), 1);
  EXPECT_EQ(ToWire(RpcType::kNotify), 2);
  EXPECT_EQ(ToWire(RpcType::kProbe), 3);
  EXPECT_EQ(ToWire(RpcType::kExchange), 4);
}

TEST(MessagesTest, NotifyRoundTripsAndIsStrict) {
  const NotifyRequest in{"prefill-3", std::string("done\0with\xff bytes", 16)};
  const std::string packed = Pack(in);
  Result<NotifyRequest> out = UnpackNotifyRequest(packed);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, in);
  ExpectStrict(packed, UnpackNotifyRequest);

  EXPECT_TRUE(UnpackNotifyRequest(Pack(NotifyRequest{"a", ""})).ok());
  EXPECT_EQ(UnpackNotifyRequest(Pack(NotifyRequest{"", "x"})).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(MessagesTest, NotifyLayoutIsLengthPrefixedLittleEndian) {
  EXPECT_EQ(Pack(NotifyRequest{"ab", "c"}), std::string("\x02\x00\x00\x00"
                                                        "ab"
                                                        "\x01\x00\x00\x00"
                                                        "c",
                                                        11));
}

TEST(MessagesTest, ProbeRoundTripsAndIsStrict) {
  const ProbeResponse in{0x1122334455667788ull, "decode-7"};
  const std::string packed = Pack(in);
  Result<ProbeResponse> out = UnpackProbeResponse(packed);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, in);
  ExpectStrict(packed, UnpackProbeResponse);
  EXPECT_TRUE(UnpackEmpty("", "probe request").ok());
  EXPECT_EQ(UnpackEmpty("x", "probe request").code(), StatusCode::kInvalidArgument);
}

TEST(MessagesTest, ExchangeRoundTripsAndIsStrict) {
  const ExchangeRequest in{"rdma", std::string("\x00\x01qp", 4)};
  const std::string packed = Pack(in);
  Result<ExchangeRequest> out = UnpackExchangeRequest(packed);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, in);
  ExpectStrict(packed, UnpackExchangeRequest);
  EXPECT_EQ(UnpackExchangeRequest(Pack(ExchangeRequest{"", "x"})).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(MessagesTest, GetSegmentDescKeyIsTheWholePayload) {
  const std::string key = "ferry/rpc_meta/10.0.0.1:9000";
  Result<std::string> out = UnpackGetSegmentDescRequest(PackGetSegmentDescRequest(key));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, key);
  EXPECT_EQ(UnpackGetSegmentDescRequest("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(UnpackGetSegmentDescRequest(std::string(kMaxKeyBytes + 1, 'k')).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(MessagesTest, HugeLengthPrefixIsRejectedNotAllocated) {
  // segment_name claims 4 GiB - 1 bytes but 3 follow.
  const std::string packed(
      "\xff\xff\xff\xff"
      "abc",
      7);
  EXPECT_EQ(UnpackNotifyRequest(packed).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ferry
