// Fuzzes the RPC frame header and every RPC payload decoder (rpc/frame.h, rpc/messages.h): what
// an engine's RPC server and client read from a peer's socket, and the CRC32C (common/crc32c.h)
// that guards them.
//
// Input: one selector byte (below), then the bytes that decoder gets. With kSeal set in the
// selector, the harness first makes the header's checksums right (header_crc, and for a whole
// frame payload_crc too), so that mutations reach the checks behind them.
// Contracts checked, beyond "no crash, no UB, no leak": every decoder is strict, so whatever it
// accepts encodes back to exactly the input bytes; a decode error is InvalidArgument; an
// accepted header's prefix passes FramePrefixError; an error payload never decodes to OK; a
// frame's payload is checked against its checksum before a message decoder sees it; the
// hardware and portable CRC32C agree, and extending a CRC piecewise equals computing it whole.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/crc32c.h"
#include "common/wire_codec.h"
#include "fuzz_check.h"
#include "rpc/frame.h"
#include "rpc/messages.h"

namespace ferry {
namespace {

enum Selector : uint8_t {
  kFrameHeader = 0,
  kErrorPayload,
  kGetSegmentDescRequest,
  kNotifyRequest,
  kProbeResponse,
  kExchangeRequest,
  kEmpty,
  kWholeFrame,
  kCrc,
  kSelectorCount,
};
constexpr uint8_t kSeal = 0x80;
// Offsets of the checksums in a header (rpc/frame.h's layout).
constexpr size_t kPayloadCrcAt = 24;
constexpr size_t kHeaderCrcAt = 28;

void CheckRefused(const Status& s) {
  FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument, s.ToString());
}

// Makes the header's own checksum right (the first kFrameHeaderSize bytes of `frame`).
void SealHeader(std::string& frame) {
  if (frame.size() < rpc::kFrameHeaderSize) return;
  StoreLe32(frame.data() + kHeaderCrcAt, Crc32c(frame.data(), kHeaderCrcAt));
}

Result<rpc::FrameHeader> FuzzFrameHeader(std::string_view bytes) {
  Result<rpc::FrameHeader> result = InvalidArgumentError("not decoded");
  // A small limit too: the receiver's limit is a parameter, and payload_len must respect it.
  for (const size_t limit : {size_t{16}, rpc::kDefaultMaxFrameBytes}) {
    Result<rpc::FrameHeader> h = rpc::DecodeFrameHeader(bytes, limit);
    if (!h.ok()) {
      CheckRefused(h.status());
      result = h;
      continue;
    }
    FUZZ_CHECK(bytes.size() == rpc::kFrameHeaderSize, "a header of the wrong size decoded");
    FUZZ_CHECK(h->payload_len <= limit, "payload_len over the receiver's limit");
    FUZZ_CHECK(!h->is_error() || h->is_response(), "error flag on a request");
    FUZZ_CHECK(rpc::FramePrefixError(bytes).ok(), "an accepted header's prefix is refused");
    std::string encoded(rpc::kFrameHeaderSize, '\0');
    rpc::EncodeFrameHeader(*h, encoded.data());
    FUZZ_CHECK(encoded == bytes, "header does not encode back to its bytes");
    result = h;
  }
  return result;
}

void FuzzErrorPayload(std::string_view bytes) {
  const Status s = rpc::DecodeErrorPayload(bytes);
  FUZZ_CHECK(!s.ok(), "an error payload decoded to OK");
  // What this side would send back for it decodes to the same code.
  const std::string encoded = rpc::EncodeErrorPayload(s);
  FUZZ_CHECK(rpc::DecodeErrorPayload(encoded).code() == s.code(),
             "error code does not survive a round trip");
  FUZZ_CHECK(encoded.size() <= 1 + rpc::kMaxErrorMessageBytes, "error payload over its bound");
}

void FuzzGetSegmentDescRequest(std::string_view bytes) {
  Result<std::string> key = UnpackGetSegmentDescRequest(bytes);
  if (!key.ok()) return CheckRefused(key.status());
  FUZZ_CHECK(!key->empty() && key->size() <= kMaxKeyBytes, "key out of bounds");
  FUZZ_CHECK(PackGetSegmentDescRequest(*key) == bytes, "request does not pack back");
}

// `valid` states the message's own rule on what an accepted message holds.
template <typename Message, typename Unpack, typename Valid>
void FuzzMessage(std::string_view bytes, Unpack unpack, Valid valid) {
  Result<Message> m = unpack(bytes);
  if (!m.ok()) return CheckRefused(m.status());
  FUZZ_CHECK(valid(*m), "an accepted message breaks its rule");
  FUZZ_CHECK(Pack(*m) == bytes, "message does not pack back");
}

void FuzzNotifyRequest(std::string_view bytes) {
  FuzzMessage<NotifyRequest>(bytes, UnpackNotifyRequest,
                             [](const NotifyRequest& m) { return !m.segment_name.empty(); });
}
void FuzzProbeResponse(std::string_view bytes) {
  FuzzMessage<ProbeResponse>(bytes, UnpackProbeResponse,
                             [](const ProbeResponse&) { return true; });
}
void FuzzExchangeRequest(std::string_view bytes) {
  FuzzMessage<ExchangeRequest>(bytes, UnpackExchangeRequest,
                               [](const ExchangeRequest& m) { return !m.transport.empty(); });
}

void FuzzEmpty(std::string_view bytes) {
  const Status s = UnpackEmpty(bytes, "fuzzed payload");
  FUZZ_CHECK(s.ok() == bytes.empty(), s.ToString());
  if (!s.ok()) CheckRefused(s);
}

// A header and its payload, as a receiver takes them: header, payload checksum, then the
// message decoder its type and flags name.
void FuzzWholeFrame(std::string frame, bool seal) {
  if (frame.size() < rpc::kFrameHeaderSize) return;
  if (seal) {
    const std::string_view payload = std::string_view(frame).substr(rpc::kFrameHeaderSize);
    StoreLe32(frame.data() + 20, static_cast<uint32_t>(payload.size()));
    StoreLe32(frame.data() + kPayloadCrcAt, Crc32c(payload));
    SealHeader(frame);
  }
  const std::string_view bytes = frame;
  Result<rpc::FrameHeader> h =
      FuzzFrameHeader(bytes.substr(0, rpc::kFrameHeaderSize));
  if (!h.ok()) return;
  const std::string_view payload = bytes.substr(rpc::kFrameHeaderSize);
  if (payload.size() != h->payload_len) return;
  const Status verified = rpc::VerifyFramePayload(*h, payload);
  FUZZ_CHECK(verified.ok() == (Crc32c(payload) == h->payload_crc), verified.ToString());
  if (!verified.ok()) return CheckRefused(verified);
  if (h->is_error()) return FuzzErrorPayload(payload);
  switch (static_cast<RpcType>(h->type)) {
    case RpcType::kGetSegmentDesc:
      if (!h->is_response()) FuzzGetSegmentDescRequest(payload);
      break;
    case RpcType::kNotify:
      h->is_response() ? FuzzEmpty(payload) : FuzzNotifyRequest(payload);
      break;
    case RpcType::kProbe:
      h->is_response() ? FuzzProbeResponse(payload) : FuzzEmpty(payload);
      break;
    case RpcType::kExchange:
      if (!h->is_response()) FuzzExchangeRequest(payload);
      break;
    default:
      break;
  }
}

void FuzzCrc(std::string_view bytes) {
  const uint32_t whole = Crc32c(bytes);
  FUZZ_CHECK(crc32c_internal::ExtendPortable(0, bytes.data(), bytes.size()) == whole,
             "portable CRC32C differs");
  if (crc32c_internal::HardwareAvailable()) {
    FUZZ_CHECK(crc32c_internal::ExtendHardware(0, bytes.data(), bytes.size()) == whole,
               "hardware CRC32C differs");
  }
  // Split where the first byte says (the hardware path has several stream lengths).
  const size_t cut = bytes.empty() ? 0 : static_cast<uint8_t>(bytes[0]) % (bytes.size() + 1);
  const uint32_t first = Crc32c(bytes.substr(0, cut));
  FUZZ_CHECK(Crc32cExtend(first, bytes.data() + cut, bytes.size() - cut) == whole,
             "piecewise CRC32C differs");
}

}  // namespace
}  // namespace ferry

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry;
  if (size == 0) return 0;
  const std::string_view bytes = fuzz::AsText(data + 1, size - 1);
  const bool seal = (data[0] & kSeal) != 0;
  switch ((data[0] & ~kSeal) % kSelectorCount) {
    case kFrameHeader: {
      std::string header(bytes);
      if (seal) SealHeader(header);
      (void)FuzzFrameHeader(header);
      break;
    }
    case kErrorPayload:
      FuzzErrorPayload(bytes);
      break;
    case kGetSegmentDescRequest:
      FuzzGetSegmentDescRequest(bytes);
      break;
    case kNotifyRequest:
      FuzzNotifyRequest(bytes);
      break;
    case kProbeResponse:
      FuzzProbeResponse(bytes);
      break;
    case kExchangeRequest:
      FuzzExchangeRequest(bytes);
      break;
    case kEmpty:
      FuzzEmpty(bytes);
      break;
    case kWholeFrame:
      FuzzWholeFrame(std::string(bytes), seal);
      break;
    case kCrc:
      FuzzCrc(bytes);
      break;
    default:
      break;
  }
  return 0;
}
