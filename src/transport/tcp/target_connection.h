// TargetConnection: serves one accepted data connection. It first runs the server side of the
// authentication (common/peer_auth.h): with a secret, a peer must prove it within io_timeout
// of the accept; without one, only a peer that asks to authenticate is refused. A refused peer
// gets its refusal and the connection closes before a request is read (logged once per peer
// address through the runtime's RefusalLog). Then it answers the initiator's clock hello
// (the first frame, and later ones) with its steady clock. Requests are handled strictly in
// order: a request whose deadline (in this host's clock) has passed is refused with Timeout
// before anything is pinned, and a WRITE stops landing once its deadline passes mid-payload;
// otherwise each access is pinned with TransportContext::PinRemoteAccess before a byte moves; a
// WRITE's payload lands in the pinned memory (a long one straight from the socket, short ones
// copied from a read-ahead buffer that takes many small requests in one recv) and is answered
// once all of it is there; a READ is answered with its payload sent straight from the pinned
// memory, the pin held until the last byte is handed to the kernel. A rejected WRITE's payload is
// read and discarded, nothing is written, and the rejection is the answer (tcp_protocol.h).
// Checksums: a request header is believed only when its checksum matches, and a checksummed WRITE's
// payload is checked as it lands; a READ's answer carries the checksum of its payload. A bad frame
// (a checksum mismatch included) is answered with a closing notice saying why, after which the
// connection reads nothing more and closes once the initiator hangs up (or after io_timeout); so
// does a connection with a request or answer under way that makes no progress
// for io_timeout, and so does an initiator's hang-up (close, half-close or reset): it gave up on
// what it sent, so nothing not yet started is applied. At most kMaxQueuedResponses answers wait
// to be sent; beyond that the connection starts no request (and reads nothing, requests read
// ahead waiting in the buffer) until the initiator takes them. Its copies between sockets and
// pinned memory stand for a NIC's DMA (common/dma_scope.h).
//
// Staged memory (TransportContext::IsStagedAddress: file buffers and device memory): its
// addresses are never dereferenced. An access to it is pinned like any other, then its bytes go
// through a staging buffer of this
// connection: a READ's answer waits in order (answers behind it wait too) until
// TransportContext::StartStagedIo filled the staging (from the file, or the device), and is then
// sent from it; a WRITE's payload lands in the staging, is checked (checksum), and only then
// written to the file or device with StartStagedIo, the answer waiting for that write. The pin goes
// with the I/O and is held until it ended. The staging a connection holds is bounded
// (TcpTransportOptions::staging_bytes): a request that would exceed it is parked, unpinned, and the
// connection reads nothing more until answers leaving free enough; one longer than the whole budget
// is refused (InvalidArgument); a staging that cannot be allocated refuses the request (Again).
// While the first answer waits for its I/O the connection does not watch for writability (the loop
// would spin); the I/O's completion comes back to the loop thread as a posted task and sends. A
// connection closed meanwhile drops it (the staging lives until the I/O ended).
//
// Thread contract: every method runs on the connection's loop thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "common/peer_auth.h"
#include "transport/tcp/io_loop.h"
#include "transport/tcp/tcp_protocol.h"
#include "transport/tcp/tcp_socket.h"
#include "transport/transport.h"

namespace ferry::tcp {

struct TcpRuntime;

class TargetConnection final : public IoHandler,
                               public std::enable_shared_from_this<TargetConnection> {
 public:
  static constexpr size_t kMaxQueuedResponses = 256;

  // Takes `fd`, an accepted non-blocking socket; `peer` names the initiator in logs. Counts
  // itself in runtime->open_target_connections until closed.
  TargetConnection(std::shared_ptr<TcpRuntime> runtime, IoLoop* loop, UniqueFd fd,
                   std::string peer);
  ~TargetConnection() override;

  // Loop thread: starts watching the socket (closes it when the loop refuses).
  void Start();

  void OnEvents(uint32_t events) override;
  void OnTick(TimePoint now) override;
  void Shutdown(const Status& why) override { Close(why.message()); }

 private:
  enum class Phase { kHeader, kPayload, kDiscard };
  enum class Io { kProgress, kWouldBlock, kClosed };

  struct Response {
    std::array<uint8_t, kResponseHeaderSize> header{};
    size_t header_size = kResponseHeaderSize;  // kHelloSize for a hello reply
    std::string message;
    const uint8_t* payload = nullptr;  // READ data, inside `pin`'s range (or in `staging`)
    uint64_t payload_length = 0;
    AccessPin pin;  // held until the payload is sent
    uint64_t total = 0;
    uint64_t sent = 0;
    // A staged access (a file buffer or device memory): the staging it holds (shared with the
    // I/O until that ended), counted in staged_ until this answer goes; `staged_io` names it for
    // the completion,
    // and `pending` holds this answer (and those behind it) until the I/O ended.
    std::shared_ptr<uint8_t[]> staging;
    uint64_t staged = 0;
    uint64_t staged_io = 0;
    bool staged_read = false;  // a READ: its payload is the staging
    bool pending = false;
    uint64_t request_id = 0;
    bool checksum = false;
  };

  void ReceiveReady();
  // Drives the handshake as far as the socket allows; once it is done, what it read of the
  // first frame (without a secret) is in header_bytes_. Closes the connection on a denial.
  void Authenticate();
  Io ReadSome(void* buf, size_t len, size_t* got);
  // Parses the read-ahead bytes (headers, short payloads, discarded payloads) until they run
  // out or the connection is throttled; false when it closed or found a bad frame.
  bool ConsumeBuffered();
  // The deadline of the WRITE being received passed: the rest of its payload is discarded.
  void ExpireWrite();
  // The WRITE's whole payload landed: checks its checksum and answers it. False: bad frame.
  bool FinishWrite();
  // Answers wait at the cap: no new request is started until the initiator takes some.
  bool Throttled() const;
  // A whole request header arrived: check it and start serving it. False: closed.
  bool OnRequestHeader();
  // Serves request_ (decoded): refuses it when expired, else pins it; parks it (unpinned) when
  // it is a staged access the staging cannot take yet, else starts it.
  void StartRequest();
  // A staged READ, pinned: queues its pending answer and starts the read into staging.
  void StartStagedRead(AccessPin pin);
  // The WRITE whose payload landed in write_staging_ is checked: write it to the file/device.
  void StartStagedWrite();
  // Starts the I/O of `r` (pending, queued last) with StartStagedIo; on a refusal answers with it.
  void StartStagedIo(Response& r, OpCode op, AccessPin pin);
  // The staged I/O `id` ended (loop thread, posted by its completion).
  void OnStagedIoDone(uint64_t id, const Status& status);
  // The parked request fits the staging now: serve it, and read on.
  void MaybeUnpark();
  // Where the payload byte `offset` of the WRITE being received lands.
  uint8_t* PayloadPtr(uint64_t offset) const;
  // A whole hello arrived in header_bytes_: answer it. False: closed.
  bool OnHello();
  // Whether the request being served passed its deadline (this host's clock).
  bool RequestExpired() const;
  // Counts and logs a bad frame, queues the closing notice saying `what` and stops reading.
  void BadFrame(const std::string& what);
  void QueueResponse(const Status& status, const uint8_t* payload, uint64_t length, AccessPin pin);
  // Encodes `r`'s header (and message) for `status` and a payload of `length` bytes at `payload`.
  static void FillResponse(Response& r, uint64_t request_id, bool checksum, const Status& status,
                           const uint8_t* payload, uint64_t length);
  void QueueNotice(const Status& why);
  void SendReady();
  void UpdateInterest();
  bool Busy() const;
  void Close(const std::string& why);

  const std::shared_ptr<TcpRuntime> runtime_;
  IoLoop* const loop_;
  UniqueFd fd_;
  const std::string peer_;
  bool closed_ = false;
  bool watched_ = false;
  uint32_t interest_ = 0;
  TimePoint last_progress_;
  const TimePoint accepted_at_;
  std::optional<auth::Handshake> auth_;  // from Start until the handshake is done
  bool auth_began_ = false;              // a byte of it (or of a first frame) arrived

  Phase phase_ = Phase::kHeader;
  std::array<uint8_t, kRequestHeaderSize> header_bytes_{};
  size_t header_got_ = 0;
  bool hello_seen_ = false;
  RequestHeader request_;
  uint64_t last_request_id_ = 0;
  uint64_t payload_got_ = 0;
  uint32_t payload_crc_ = 0;  // of the WRITE payload received so far (when checksummed)
  bool closing_ = false;      // a closing notice is queued: nothing more is read
  bool shut_down_ = false;    // our side is shut down (the notice is out)
  AccessPin pin_;             // the WRITE being received
  Status rejection_;          // the WRITE being discarded
  // Bytes read ahead of the request being parsed: [in_begin_, in_end_) of read_ahead_ (made on
  // first use) wait only while the connection is throttled.
  std::unique_ptr<uint8_t[]> read_ahead_;
  size_t in_begin_ = 0;
  size_t in_end_ = 0;
  std::deque<Response> responses_;
  // Staged accesses: staging held (answers' and write_staging_), the WRITE payload being
  // received into staging, the request parked for want of staging, and the next I/O's name.
  uint64_t staged_ = 0;
  std::shared_ptr<uint8_t[]> write_staging_;
  bool parked_ = false;
  uint64_t next_staged_io_ = 0;
};

}  // namespace ferry::tcp
