// ServerConnection: one accepted RPC connection inside the server's I/O loop, as a non-blocking
// state machine: read one request frame -> hand it to a handler -> write the response -> read
// the next. Only one request per connection is in flight, so responses leave in request order,
// and a connection never reads ahead of its handler (pipelined requests wait in the socket).
//
// Deadlines: between frames the connection may stay idle for `idle_timeout`; once a frame has
// begun, and while a response is being written, each read or write must make progress within
// `io_timeout`. While its handler runs a connection has no deadline.
//
// Thread contract: thread-compatible; the server's loop thread is its only user.
#pragma once

#include <chrono>
#include <string>

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
    kBadFrame,    // the peer sent a frame that fails validation; close and count it
    kIoError,     // the socket failed; close
  };

  ServerConnection(UniqueFd fd, PeerInfo peer, const ConnectionLimits& limits, Deadline now);
  ServerConnection(const ServerConnection&) = delete;
  ServerConnection& operator=(const ServerConnection&) = delete;

  int fd() const { return fd_.get(); }
  const PeerInfo& peer() const { return peer_; }

  // poll() events it waits for: POLLIN while reading, POLLOUT while writing, 0 while handling.
  short PollEvents() const;
  // When it must be closed unless it makes progress first (Deadline::max() while handling).
  Deadline deadline() const;

  // Reads what the socket has. On kRequest, *request holds the frame; on kBadFrame or
  // kIoError, *error says why. Only call while PollEvents() has POLLIN.
  Outcome OnReadable(Deadline now, InboundRequest* request, std::string* error);

  // Queues the encoded response frame; only after OnReadable returned kRequest.
  void StartResponse(std::string frame, Deadline now);

  // Writes what the socket takes; back to reading when the response is out. kPending or
  // kIoError (with *error). Only call while PollEvents() has POLLOUT.
  Outcome OnWritable(Deadline now, std::string* error);

 private:
  enum class Phase { kReading, kHandling, kWriting };

  // Handles a complete header: validates it and sizes the payload buffer.
  Outcome OnHeader(std::string* error);
  // Enlarges payload_ towards header_.payload_len as its bytes arrive.
  void GrowPayloadBuffer();

  UniqueFd fd_;
  const PeerInfo peer_;
  const ConnectionLimits limits_;
  Phase phase_ = Phase::kReading;
  Deadline last_progress_;
  char header_bytes_[kFrameHeaderSize] = {};
  size_t header_have_ = 0;
  FrameHeader header_;
  std::string payload_;
  size_t payload_have_ = 0;
  std::string out_;
  size_t out_sent_ = 0;
};

}  // namespace ferry::rpc
