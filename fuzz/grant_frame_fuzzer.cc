// Fuzzes the same-host grant channel's frames (transport/samehost/grant_wire.h): the header and
// payload fields the grant server and its clients parse, and RecvFrame reading a whole byte
// stream from a real Unix socket (a socketpair; the sending end is closed after the input).
//
// Input: one selector byte (below), then the bytes.
// Contracts checked, beyond "no crash, no UB, no leak":
//  - an accepted header encodes back to exactly its bytes, within kMaxFramePayload;
//  - a status the Reader accepts encodes back (PutStatus) to exactly the bytes it consumed;
//  - a wire deadline survives Decode -> Encode (all ones and everything past int64 mean none);
//  - RecvFrame returns OK exactly when the stream is one well-formed frame, a bad frame or bytes
//    beyond it as InvalidArgument, a stream that ends early as Unavailable.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "fuzz_check.h"
#include "transport/samehost/grant_wire.h"

namespace ferry::samehost {
namespace {

enum Selector : uint8_t {
  kFrame = 0,
  kStream,
  kSelectorCount,
};

void CheckRefused(const Status& s) {
  FUZZ_CHECK(s.code() == StatusCode::kInvalidArgument, s.ToString());
}

void FuzzFrame(std::string_view bytes) {
  if (bytes.size() < wire::kHeaderSize) return;
  Result<wire::FrameHeader> h = wire::ParseHeader(reinterpret_cast<const uint8_t*>(bytes.data()));
  if (!h.ok()) {
    CheckRefused(h.status());
  } else {
    FUZZ_CHECK(h->payload_length <= wire::kMaxFramePayload, "payload over the limit");
    std::string encoded;
    wire::PutHeader(&encoded, h->type, h->payload_length);
    FUZZ_CHECK(encoded == bytes.substr(0, wire::kHeaderSize), "header does not encode back");
  }
  // The payload as a run of statuses (an Acquire reply's shape), then as numbers.
  const std::string_view payload = bytes.substr(wire::kHeaderSize);
  wire::Reader reader(payload);
  for (;;) {
    const size_t before = reader.remaining();
    Status s;
    if (!reader.GetStatus(&s)) break;
    const size_t used = before - reader.remaining();
    std::string encoded;
    wire::PutStatus(&encoded, s);
    FUZZ_CHECK(encoded == payload.substr(payload.size() - before, used),
               "status does not encode back to its bytes");
    FUZZ_CHECK(s.message().size() <= wire::kMaxStatusText, "status text over its bound");
  }
  wire::Reader numbers(payload);
  uint64_t v = 0;
  while (numbers.GetU64(&v)) {
    const uint64_t again = wire::EncodeDeadline(wire::DecodeDeadline(v));
    if (v >= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      FUZZ_CHECK(again == wire::kNoDeadline, "a deadline past int64 is not 'none'");
    } else {
      FUZZ_CHECK(again == v, "deadline does not survive a round trip");
    }
  }
}

void FuzzStream(std::string_view bytes) {
  int fds[2];
  FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0,
             "socketpair: " + std::to_string(errno));
  UniqueFd reader(fds[0]);
  UniqueFd writer(fds[1]);
  // The input fits the socket buffer (libFuzzer's inputs are a few KiB): write it all, close.
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n =
        ::send(writer.get(), bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) return;  // the buffer is full: an input far larger than the harness is for
    sent += static_cast<size_t>(n);
  }
  writer.Reset();
  wire::FrameHeader header;
  std::string payload;
  UniqueFd received;
  // The writer is closed, so RecvFrame never waits for this deadline; it only bounds a bug.
  const Status s =
      wire::RecvFrame(reader.get(), std::chrono::steady_clock::now() + std::chrono::seconds(10),
                      &header, &payload, &received);
  FUZZ_CHECK(!received.valid(), "an fd arrived from nowhere");
  FUZZ_CHECK(s.code() != StatusCode::kTimeout, "RecvFrame waited on a closed stream");
  if (bytes.size() < wire::kHeaderSize) {
    FUZZ_CHECK(s.code() == StatusCode::kUnavailable, s.ToString());
    return;
  }
  Result<wire::FrameHeader> h = wire::ParseHeader(reinterpret_cast<const uint8_t*>(bytes.data()));
  if (!h.ok()) {
    CheckRefused(s);
    return;
  }
  const size_t total = wire::kHeaderSize + h->payload_length;
  // One recvmsg takes the first 16 KiB; bytes beyond the frame are seen only within them.
  if (bytes.size() > 16 * 1024) return;
  if (bytes.size() == total) {
    FUZZ_CHECK(s.ok(), s.ToString());
    FUZZ_CHECK(header.type == h->type && payload == bytes.substr(wire::kHeaderSize),
               "RecvFrame returned another frame");
  } else if (bytes.size() > total) {
    CheckRefused(s);
  } else {
    FUZZ_CHECK(s.code() == StatusCode::kUnavailable, s.ToString());
  }
}

}  // namespace
}  // namespace ferry::samehost

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ferry::samehost;
  if (size == 0) return 0;
  const std::string_view bytes = ferry::fuzz::AsText(data + 1, size - 1);
  switch (data[0] % kSelectorCount) {
    case kFrame:
      FuzzFrame(bytes);
      break;
    case kStream:
      FuzzStream(bytes);
      break;
    default:
      break;
  }
  return 0;
}
