// The grant channel's wire format and socket helpers (see grant_channel.h for the protocol's
// purpose). Internal to transport/samehost.
//
// Every frame is an 8-byte header and a payload, little-endian (common/wire_codec.h):
//   u32 payload_length | u8 type | u8 version (3) | u16 reserved (0)
// Payloads:
//   kAcquire        u32 count, count x {u64 addr, u64 length, u64 incarnation, u64 generation,
//                   u64 deadline}   (deadline: CLOCK_MONOTONIC nanoseconds, all ones = none)
//   kAcquireReply   status, u32 count, count x {status, and when it is Ok: u32 lease index
//                   (pins::kNoLease: none), u64 lease word, u64 region addr, u64 region length}
//                   (status: u8 code, u16 n, n bytes text; the code is common/wire_status.h's
//                   number; the lease fields are pin_table.h's)
//   kRelease        (empty; no reply)
//   kFetchFd        u64 buffer id
//   kFetchFdReply   status; exactly one fd rides along (SCM_RIGHTS) when the code is Ok
//   kMapTable       (empty)
//   kMapTableReply  status, u32 entries; the lease table's memfd (read-only) rides along when Ok
//   kMapSlot        (empty)
//   kMapSlotReply   status, u32 entries; this connection's pin slot memfd rides along when Ok
// A payload longer than kMaxFramePayload, an unknown type or version, a non-zero reserved field,
// a payload whose length disagrees with its content, or a status code the wire table does not
// know is a bad frame: the receiver closes the connection.
//
// Version 3 added the pin table (kMapTable, kMapSlot, the lease fields of an Acquire reply).
// Version 2 added the deadline to each range. Peers of different versions (1, 2, 3) do not
// talk: each closes the other's connection as a bad frame at its first frame (the initiator
// sees Unavailable and the engine falls back to another transport): a version-2 and a
// version-3 process of one host move their bytes over another transport until both run the
// same version. Deadlines are steady_clock (CLOCK_MONOTONIC) values, comparable because both
// ends run on one host (same host is what these transports require).
//
// Thread contract: UniqueFd is thread-compatible; the functions are thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/unique_fd.h"
#include "common/wire_codec.h"
#include "ferry/status.h"

namespace ferry::samehost {

using ::ferry::UniqueFd;

namespace wire {

using Deadline = std::chrono::steady_clock::time_point;

constexpr uint8_t kVersion = 3;
constexpr size_t kHeaderSize = 8;
constexpr size_t kRangeSize = 40;
// The most ranges one Acquire may carry, whatever a server allows.
constexpr size_t kMaxRanges = 4096;
// Status texts on the wire are cut to this many bytes.
constexpr size_t kMaxStatusText = 255;
// Hard limit on a payload: an Acquire reply of kMaxRanges statuses with full texts (or leases)
// fits.
constexpr uint32_t kMaxFramePayload = 2u << 20;

enum class FrameType : uint8_t {
  kAcquire = 1,
  kAcquireReply = 2,
  kRelease = 3,
  kFetchFd = 4,
  kFetchFdReply = 5,
  kMapTable = 6,
  kMapTableReply = 7,
  kMapSlot = 8,
  kMapSlotReply = 9,
};

// A range's deadline on the wire: steady_clock nanoseconds; kNoDeadline for time_point::max().
constexpr uint64_t kNoDeadline = ~uint64_t{0};
uint64_t EncodeDeadline(Deadline deadline);
Deadline DecodeDeadline(uint64_t nanoseconds);

struct FrameHeader {
  FrameType type = FrameType::kAcquire;
  uint32_t payload_length = 0;
};

// Appends little-endian integers / a status to `out` (through common/wire_codec.h).
void PutU16(std::string* out, uint16_t v);
void PutU32(std::string* out, uint32_t v);
void PutU64(std::string* out, uint64_t v);
void PutStatus(std::string* out, const Status& status);

// Appends a header for a payload of `payload_length` bytes.
void PutHeader(std::string* out, FrameType type, uint32_t payload_length);
// Parses a header; InvalidArgument (a bad frame) when it breaks the rules above.
Result<FrameHeader> ParseHeader(const uint8_t* bytes);

// Reads a payload front to back (a common/wire_codec.h reader); every getter fails (returns
// false, its output untouched) past the end or on a malformed value.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : in_(bytes, "grant frame") {}
  bool GetU32(uint32_t* v);
  bool GetU64(uint64_t* v);
  bool GetStatus(Status* status);
  size_t remaining() const { return in_.remaining(); }

 private:
  WireReader in_;
};

// Sends all of `bytes` on non-blocking `fd` (MSG_NOSIGNAL), waiting for room until `deadline`.
// When `pass_fd` >= 0 it rides along the first bytes (SCM_RIGHTS). Timeout / Unavailable.
Status SendAll(int fd, std::string_view bytes, Deadline deadline, int pass_fd = -1);

// Receives exactly one frame from non-blocking `fd` into `header` / `payload`, waiting until
// `deadline`. An fd passed along (SCM_RIGHTS) is stored in `received_fd` (when non-null) or
// closed. Timeout; Unavailable (closed, I/O error); InvalidArgument (bad frame, or more bytes
// than one frame: the peer sent what was not asked for).
Status RecvFrame(int fd, Deadline deadline, FrameHeader* header, std::string* payload,
                 UniqueFd* received_fd);

// Waits until `fd` is ready for `events` or `deadline`: Ok, Timeout, or Unavailable.
Status WaitReady(int fd, short events, Deadline deadline);

}  // namespace wire
}  // namespace ferry::samehost
