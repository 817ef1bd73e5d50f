// The rdma transport's byte formats: round trips, and strict rejection of anything else.
#include "transport/rdma/rdma_wire.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ferry::rdma {
namespace {

TEST(RdmaWireTest, EndpointsRoundTripAndBinaryAddressesSurvive) {
  PublishedEndpoints in{
      "tcp;ofi_rxm",
      {{"127.0.0.1/32", "lo", false, std::string("\x02\x00\x9a\x1f\x7f\0\0\x01", 8)},
       {"IB-0xfe80", "mlx5_1", true, std::string(16, '\xff')}}};
  const std::string text = EncodeEndpoints(in);
  Result<PublishedEndpoints> out = DecodeEndpoints(text);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, in);
}

TEST(RdmaWireTest, MalformedEndpointListsAreRejected) {
  const std::string good = EncodeEndpoints({"efa", {{"f", "d", true, "ab"}}});
  ASSERT_TRUE(DecodeEndpoints(good).ok());
  const std::vector<std::string> bad = {
      "",
      good.substr(0, good.size() - 1),                    // no final newline
      "ferry-rdma/2 656661 1\nep 66 64 1 6162\n",         // another version
      "ferry-rdma/1 656661 2\nep 66 64 1 6162\n",         // count does not match
      "ferry-rdma/1 656661 0\n",                          // no endpoint
      "ferry-rdma/1 656661 1\nep 66 64 2 6162\n",         // virt flag not 0/1
      "ferry-rdma/1 656661 1\nep 66 64 1 616\n",          // odd hex
      "ferry-rdma/1 656661 1\nep 66 64 1 6G62\n",         // not hex
      "ferry-rdma/1 656661 1\nep 66 64 1 6162 \n",        // trailing space
      "ferry-rdma/1 656661 1\nep 66  64 1 6162\n",        // double space
      "ferry-rdma/1 656661 1\nep 66 64 1 -\n",            // empty address
      "ferry-rdma/1 656661 01\nep 66 64 1 6162\n",        // leading zero
      "ferry-rdma/1 656661 1\n\nep 66 64 1 6162\n",       // empty line
      "ferry-rdma/1 656661 1\nep 66 64 1 6162\nextra\n",  // trailing line
  };
  for (const std::string& text : bad) {
    EXPECT_EQ(DecodeEndpoints(text).status().code(), StatusCode::kInvalidArgument) << text;
  }
}

TEST(RdmaWireTest, KeysRoundTripAndMalformedKeysAreRejected) {
  const RemoteKey in{0x1234, 0x7f0000001000, 4096, {0, 0xffffffffffffffff, 42}};
  Result<RemoteKey> out = DecodeKey(EncodeKey(in));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, in);
  const std::vector<std::string> bad = {
      "",
      "ferry-rdma-key/1 1 1000 0 5",                   // empty range
      "ferry-rdma-key/1 1 ffffffffffffffff 2 5",       // wraps
      "ferry-rdma-key/1 1 1000 10",                    // no rkeys
      "ferry-rdma-key/1 1 1000 10 5,",                 // empty rkey
      "ferry-rdma-key/1 1 1000 10 5,,6",               // empty rkey
      "ferry-rdma-key/1 1 1000 10 10000000000000000",  // 17 digits
      "ferry-rdma-key/1 1 1000 10 5\n",                // newline
      "ferry-rdma-key/1 1 1000 10 5 6",                // extra token
      "ferry-tcp-key/1 1 1000 10 5",                   // another tag
      "ferry-rdma-key/1 1 1000 10 A",                  // uppercase
  };
  for (const std::string& text : bad) {
    EXPECT_EQ(DecodeKey(text).status().code(), StatusCode::kInvalidArgument) << text;
  }
}

TEST(RdmaWireTest, ChecksAndRepliesRoundTrip) {
  const std::vector<AccessCheck> checks = {{1, 0x1000, 64, 7, 3}, {2, 0, 1, 0xffffffffffffffff, 1}};
  Result<std::vector<AccessCheck>> decoded = DecodeCheckRequest(EncodeCheckRequest(checks));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, checks);
  const std::vector<Status> results = {Status::Ok(), StaleError("gone \n with newline"),
                                       PermissionDeniedError("")};
  Result<std::vector<Status>> replies = DecodeCheckReply(EncodeCheckReply(results), 3);
  ASSERT_TRUE(replies.ok()) << replies.status();
  ASSERT_EQ(replies->size(), 3u);
  EXPECT_TRUE((*replies)[0].ok());
  EXPECT_EQ((*replies)[1], results[1]);
  EXPECT_EQ((*replies)[2].code(), StatusCode::kPermissionDenied);
  EXPECT_FALSE(DecodeCheckReply(EncodeCheckReply(results), 2).ok());         // another count
  EXPECT_FALSE(DecodeCheckReply("ferry-rdma-checked/1 1\n63 -\n", 1).ok());  // unknown code
  EXPECT_FALSE(DecodeCheckReply("ferry-rdma-checked/1 1\nd -\n", 1).ok());   // 13: unknown
  // Codes travel as common/wire_status.h's numbers (9 = Unavailable), not the enum's values.
  const Status unavailable = UnavailableError("x");
  EXPECT_EQ(EncodeCheckReply(std::span<const Status>(&unavailable, 1)),
            "ferry-rdma-checked/1 1\n9 78\n");
  Result<std::vector<Status>> stale = DecodeCheckReply("ferry-rdma-checked/1 1\n5 -\n", 1);
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_EQ((*stale)[0].code(), StatusCode::kStale);
  EXPECT_FALSE(DecodeCheckReply("ferry-rdma-checked/1 1\n0 6162\n", 1).ok());  // OK with text
  EXPECT_FALSE(DecodeCheckRequest("ferry-rdma-check/1 1\n1 2 3 4\n").ok());
}

}  // namespace
}  // namespace ferry::rdma
