// ServerConnection: one accepted RPC connection inside the server's I/O loop, as a non-blocking
// state machine: read one request frame -> hand it to a handler -> write the response -> read
// the next. Only one request per connection is in flight, so responses leave in request order,
// and a connection never reads ahead of its handler (pipelined requests wait in the socket).
//
// Authentication comes first (common/peer_auth.h): the connection runs its server handshake
// before reading any frame. With a secret, the whole handshake must finish within `io_timeout`
// of the accept; a peer that fails it gets its refusal and kDenied (nothing was read as a
// frame). Without one, only a peer that asks for authentication is refused; the first bytes of
// anyone else's frame go on to the frame reader.
//
// Deadlines: between frames the connection may stay idle for `idle_timeout`; once a frame has
// begun, and while a response is being written, each read or write must make progress within
// `io_timeout`. While its handler runs a connection has no deadline.
//
// A bad frame (rpc/frame.h: a checksum mismatch, a wrong field, a payload over the limit) is
// never handled: the connection writes a closing notice saying why, shuts its side down, and
// then only drains what the peer still sends (discarding it, so that closing does not reset the
// notice away) until the peer closes, or io_timeout after the bad frame.
//
// Thread contract: thread-compatible; the server's loop thread is its only user.
#pragma once

#include <chrono>
#include <string>

#include "common/peer_auth.h"
#include "rpc/frame.h"
#include "rpc/peer_info.h"
#include "rpc/socket_io.h"

namespace ferry::rpc {

struct ConnectionLimits {
  size_t max_frame_bytes = kDefaultMaxFrameBytes;
  std::chrono::milliseconds io_timeout{10000};
  std::chrono::milliseconds idle_timeout{60000};
};

// A complete request frame.
struct InboundRequest {
  FrameHeader header;
  std::string payload;
};

class ServerConnection {
 public:
  enum class Outcome {
    kPending,     // nothing to do until the socket is ready again
    kRequest,     // a request is complete; the connection waits for StartResponse
    kPeerClosed,  // orderly close by the peer
    kBadFrame,    // the peer sent a frame that fails validation: count it; the connection
                  // now writes its closing notice (PollEvents() is POLLOUT), then drains
    kIoError,     // the socket failed; close
    kDenied,      // the peer failed authentication (*error says why); close and log it
  };

  // `handshake` is this connection's server side of the authentication.
  ServerConnection(UniqueFd fd, PeerInfo peer, const ConnectionLimits& limits,
                   auth::Handshake handshake, Deadline now);
  ServerConnection(const ServerConnection&) = delete;
  ServerConnection& operator=(const ServerConnection&) = delete;

  int fd() const { return fd_.get(); }
  const PeerInfo& peer() const { return peer_; }

  // poll() events it waits for: POLLIN while reading, POLLOUT while writing, 0 while handling.
  short PollEvents() const;
  // When it must be closed unless it makes progress first (Deadline::max() while handling).
  Deadline deadline() const;

  // Reads what the socket has. On kRequest, *request holds the frame; on kBadFrame, kIoError
  // or kDenied, *error says why. After a closing notice it discards what arrives, kPending
  // until the peer closes (kPeerClosed). Only call while PollEvents() has POLLIN.
  Outcome OnReadable(Deadline now, InboundRequest* request, std::string* error);

  // Queues the encoded response frame; only after OnReadable returned kRequest.
  void StartResponse(std::string frame, Deadline now);

  // Writes what the socket takes; back to reading when the response is out (to draining after
  // a closing notice). kPending, kIoError or kDenied (with *error). Only call while PollEvents()
  // has POLLOUT.
  Outcome OnWritable(Deadline now, std::string* error);

 private:
  enum class Phase { kAuth, kReading, kHandling, kWriting, kDraining };

  // Drives the handshake as far as the socket allows; on its end, moves to kReading with the
  // bytes it read of the first frame (if any) in header_bytes_.
  Outcome Authenticate(Deadline now, std::string* error);

  // Handles a complete header: validates it and sizes the payload buffer.
  Outcome OnHeader(std::string* error);
  // Queues the closing notice saying `why`; returns kBadFrame with *error = why.
  Outcome BadFrame(std::string why, Deadline now, std::string* error);
  // Discards what the peer still sends after the closing notice.
  Outcome Drain(Deadline now, std::string* error);
  // Enlarges payload_ towards header_.payload_len as its bytes arrive.
  void GrowPayloadBuffer();

  UniqueFd fd_;
  const PeerInfo peer_;
  const ConnectionLimits limits_;
  Phase phase_ = Phase::kAuth;
  auth::Handshake auth_;
  const Deadline accepted_at_;
  bool auth_began_ = false;  // a byte of the handshake (or of a first frame) arrived
  Deadline last_progress_;
  char header_bytes_[kFrameHeaderSize] = {};
  size_t header_have_ = 0;
  FrameHeader header_;
  std::string payload_;
  size_t payload_have_ = 0;
  std::string out_;
  size_t out_sent_ = 0;
  bool closing_ = false;       // out_ is the closing notice: drain once it is written
  Deadline drain_until_ = {};  // when a draining connection is closed regardless
};

}  // namespace ferry::rpc
