// Fuzzes the rdma transport's text formats (transport/rdma/rdma_wire.h): the published endpoint
// list and the key a peer decodes from a SegmentDesc, and the access-check request and reply the
// two sides exchange over RPC.
//
// Input: one selector byte (below), then the text.
// Contracts checked, beyond "no crash, no UB, no leak": the formats are strict and canonical, so
// whatever a decoder accepts encodes back to exactly the input; accepted values respect the
// bounds (counts, lengths, non-empty fields); a refusal is InvalidArgument; a check reply is
// accepted only for the count it declares.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "transport/rdma/rdma_wire.h"

namespace ferry::rdma {
namespace {

enum Selector : uint8_t {
  kEndpoints = 0,
  kKey,
  kCheckRequest,
  kCheckReply,
  kSelectorCount,
};

void CheckRefused(const Status& s) {
  FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument, s.ToString());
}

void FuzzEndpoints(std::string_view text) {
  Result<PublishedEndpoints> e = DecodeEndpoints(text);
  if (!e.ok()) return CheckRefused(e.status());
  FUZZ_CHECK(!e->provider.empty() && e->provider.size() <= kMaxNameBytes, "provider bounds");
  FUZZ_CHECK(!e->endpoints.empty() && e->endpoints.size() <= kMaxEndpoints, "endpoint count");
  for (const EndpointDesc& ep : e->endpoints) {
    FUZZ_CHECK(!ep.address.empty() && ep.address.size() <= kMaxAddressBytes, "address bounds");
    FUZZ_CHECK(ep.fabric.size() <= kMaxNameBytes && ep.domain.size() <= kMaxNameBytes,
               "name bounds");
  }
  FUZZ_CHECK(EncodeEndpoints(*e) == text, "endpoints do not encode back to the text");
}

void FuzzKey(std::string_view text) {
  Result<RemoteKey> k = DecodeKey(text);
  if (!k.ok()) return CheckRefused(k.status());
  FUZZ_CHECK(k->length > 0 && k->base + k->length > k->base, "key range empty or wrapping");
  FUZZ_CHECK(!k->rkeys.empty() && k->rkeys.size() <= kMaxEndpoints, "rkey count");
  FUZZ_CHECK(EncodeKey(*k) == text, "key does not encode back to the text");
}

void FuzzCheckRequest(std::string_view text) {
  Result<std::vector<AccessCheck>> checks = DecodeCheckRequest(text);
  if (!checks.ok()) return CheckRefused(checks.status());
  FUZZ_CHECK(checks->size() <= kMaxChecks, "too many checks");
  FUZZ_CHECK(EncodeCheckRequest(*checks) == text, "check request does not encode back");
}

void FuzzCheckReply(std::string_view text) {
  // The count the text's own lines suggest (the interesting one), and one that never matches.
  size_t lines = 0;
  for (const char c : text) lines += c == '\n' ? 1 : 0;
  const size_t expected = lines > 0 ? lines - 1 : 0;
  Result<std::vector<Status>> results = DecodeCheckReply(text, expected);
  if (!results.ok()) return CheckRefused(results.status());
  FUZZ_CHECK(results->size() == expected, "reply of another count accepted");
  for (const Status& s : *results) {
    FUZZ_CHECK(s.message().size() <= kMaxCheckMessageBytes, "message over its bound");
  }
  FUZZ_CHECK(EncodeCheckReply(*results) == text, "check reply does not encode back");
  const Result<std::vector<Status>> other = DecodeCheckReply(text, expected + 1);
  FUZZ_CHECK(!other.ok(), "reply accepted for a count it does not declare");
}

}  // namespace
}  // namespace ferry::rdma

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::rdma;
  if (size == 0) return 0;
  const std::string_view text = ferry::fuzz::AsText(data + 1, size - 1);
  switch (data[0] % kSelectorCount) {
    case kEndpoints:
      FuzzEndpoints(text);
      break;
    case kKey:
      FuzzKey(text);
      break;
    case kCheckRequest:
      FuzzCheckRequest(text);
      break;
    case kCheckReply:
      FuzzCheckReply(text);
      break;
    default:
      break;
  }
  return 0;
}
