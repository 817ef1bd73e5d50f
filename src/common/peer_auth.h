// Peer authentication: an optional cluster secret (EngineOptions::auth_secret) that every ferry
// connection (RPC, tcp data, same-host grant channels) proves before its first frame, with a
// mutual HMAC-SHA256 challenge over fresh random nonces (OpenSSL libcrypto: RAND_bytes, HMAC,
// CRYPTO_memcmp). What it gives: a peer that does not hold the secret reads or writes nothing.
// What it does not give: confidentiality or integrity of what follows the handshake (payloads
// are not encrypted, frames carry no MAC: an on-path attacker who can rewrite TCP segments can
// still inject into an authenticated connection). rdma: its set-up (Exchange) runs over an
// authenticated RPC, but its one-sided reads and writes are checked by the NIC alone: a party
// that learnt a buffer's key and address and reaches the fabric is not stopped by this.
//
// Note on rooms: common/ was "std + logging only"; this file adds libcrypto to it on purpose,
// so rpc/ and every transport share one implementation (STYLE.md 17) instead of each linking
// its own crypto.
//
// Wire (every message is exactly kMessageSize = 72 bytes, little-endian):
//   0  u32 magic     kMagic, bytes "FAUT"
//   4  u8  version   kVersion (1)
//   5  u8  type      1 hello (client), 2 challenge (server), 3 proof (client), 4 refusal (either)
//   6  u8  channel   Channel (what the connection carries; both ends must agree)
//   7  u8  detail    hello / challenge: 1 (HMAC-SHA256); refusal: RefusalReason; proof: 0
//   8  32  nonce     hello: the client's nonce; challenge: the server's; otherwise zero
//   40 32  mac       challenge: MAC(server); proof: MAC(client); otherwise zero
// MAC(role) = HMAC-SHA256(secret, "ferry-peer-auth-v1" | channel | role | client nonce |
// server nonce), role 'S' or 'C': a MAC is bound to both nonces (no replay), to the role (a
// server's MAC reflected back as a client's fails) and to the channel kind.
//
// Exchange, with a secret on both sides:
//   client -> hello(Nc);  server -> challenge(Ns, MAC(S));  client checks it, -> proof(MAC(C));
//   the server checks the proof; then the channel's own protocol starts (the client sends its
//   first frame right after the proof). A check that fails sends a refusal and closes.
// Without a secret nothing of this is sent: a client sends its protocol's first frame at once
// (today's protocol, unchanged). Mismatches are detected on both sides:
//   - a server with no secret that reads a hello answers refusal(kNoSecret) and closes;
//   - a server with a secret whose first 4 bytes are not kMagic answers refusal(kRequired);
//   - a client without a secret recognises a refusal where its protocol's first reply should be
//     (RefusalIn), so both ends fail with PermissionDenied instead of mis-parsing or hanging.
// Every message has a fixed size and the handshake reads exactly the bytes it needs, so it is
// bounded in bytes; each channel bounds it in time with its connection's io timeout.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>

#include "common/mutex.h"
#include "ferry/status.h"

namespace ferry::auth {

inline constexpr uint32_t kMagic = 0x54554146;  // bytes "FAUT"
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kMessageSize = 72;
inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kMacSize = 32;
// Shorter secrets are refused (InvalidArgument) where they are configured.
inline constexpr size_t kMinSecretBytes = 16;

// What a connection carries; part of every message and every MAC.
enum class Channel : uint8_t { kRpc = 1, kTcp = 2, kShmGrant = 3, kCxlGrant = 4 };
std::string_view ChannelName(Channel channel);

// Why a refusal was sent (its detail byte).
enum class RefusalReason : uint8_t {
  kRequired = 1,  // the sender requires authentication; the peer sent none
  kNoSecret = 2,  // the sender has no secret; the peer asked to authenticate
  kFailed = 3,    // the peer's MAC (or message) failed the check
};

// InvalidArgument unless `secret` is empty (no authentication) or at least kMinSecretBytes long.
Status ValidateSecret(std::string_view secret);

// Whether `bytes` (at least 4 of them) start with kMagic.
bool StartsWithMagic(std::span<const uint8_t> bytes);

// For a client without a secret, reading where its protocol's first reply should be: the
// PermissionDenied a refusal in `first_bytes` (>= 8 bytes of it) stands for, naming `peer`;
// OK when the bytes are not an auth message.
Status RefusalIn(std::span<const uint8_t> first_bytes, std::string_view peer);

// One side of one connection's handshake, as a sans-IO state machine: it says what to send and
// how many bytes to read next, and consumes what was read. Event-driven callers (the RPC server
// loop, the tcp I/O loops) drive it themselves; blocking callers use RunHandshake.
//
// Driving it: while output() is non-empty, send from it and report Sent(n); otherwise, while
// want() > 0, read at most want() bytes and pass them to Received(). It is finished when
// state() is kDone (authenticated, or a server without a secret whose peer sent a protocol
// frame: passthrough() holds those first bytes) or kDenied (error() says why; output() may
// still hold a refusal to send, best-effort, before closing).
//
// Thread contract: thread-compatible value; one connection's owner drives it.
class Handshake {
 public:
  enum class Role : uint8_t { kClient, kServer };
  enum class State : uint8_t { kRunning, kDone, kDenied };

  // A client (which must have a secret) or a server (with or without one). `peer` names the
  // other end in error messages. InvalidArgument for a bad secret; Internal when the system's
  // random generator fails.
  static Result<Handshake> Client(Channel channel, std::string_view secret, std::string peer);
  static Result<Handshake> Server(Channel channel, std::string_view secret, std::string peer);

  Handshake(Handshake&&) noexcept = default;
  Handshake& operator=(Handshake&&) noexcept = default;
  ~Handshake();

  std::span<const uint8_t> output() const;
  void Sent(size_t n);
  size_t want() const;
  // `bytes` must not be longer than want().
  void Received(std::span<const uint8_t> bytes);

  State state() const { return state_; }
  bool done() const { return state_ == State::kDone; }
  bool denied() const { return state_ == State::kDenied; }
  // Why it was denied: PermissionDenied naming the peer.
  const Status& error() const { return error_; }
  // Server without a secret, done: the first bytes of the peer's own protocol it read.
  std::span<const uint8_t> passthrough() const;
  // Done with both ends proven to hold the secret.
  bool authenticated() const { return authenticated_; }
  const std::string& peer() const { return peer_; }
  // Whether this end holds a secret (and so requires the peer to prove it).
  bool has_secret() const { return !secret_.empty(); }

 private:
  using Message = std::array<uint8_t, kMessageSize>;
  enum class Step : uint8_t {
    kSendHello,       // client
    kReadChallenge,   // client
    kSendProof,       // client
    kReadMagic,       // server: the first 4 bytes tell an auth hello from a protocol frame
    kReadHello,       // server
    kSendChallenge,   // server
    kReadProof,       // server
    kFinished,
  };

  Handshake(Role role, Channel channel, std::string_view secret, std::string peer);
  Status Init();
  void OnMessage();
  void OnChallenge();
  void OnHello();
  void OnProof();
  // Denied with `why`; queues a refusal with `reason` unless it is 0.
  void Deny(std::string why, uint8_t reason);
  void Finish();
  void Queue(const Message& message, Step next);
  Message MakeMessage(uint8_t type, uint8_t detail, std::span<const uint8_t> nonce,
                      std::span<const uint8_t> mac) const;
  bool Mac(char role, std::span<uint8_t, kMacSize> out) const;
  // Compares the peer's MAC for `role` with `received` (kMacSize bytes) in constant time;
  // false after denying the handshake (another secret, or HMAC itself failed).
  bool VerifyPeerMac(char role, std::span<const uint8_t> received);

  Role role_;
  Channel channel_;
  std::string secret_;  // wiped on destruction
  std::string peer_;
  State state_ = State::kRunning;
  Step step_ = Step::kFinished;
  Step after_output_ = Step::kFinished;
  Status error_;
  bool authenticated_ = false;
  std::array<uint8_t, kNonceSize> client_nonce_{};
  std::array<uint8_t, kNonceSize> server_nonce_{};
  Message out_{};
  size_t out_size_ = 0;
  size_t out_sent_ = 0;
  Message in_{};
  size_t in_got_ = 0;
};

// Runs `handshake` to its end over the connected non-blocking socket `fd`, waiting at most
// until `deadline`. OK when done; the handshake's PermissionDenied when denied (its refusal is
// sent first, best-effort); Timeout when the deadline passed; Unavailable when the connection
// failed or closed (naming `handshake`'s peer). The caller closes `fd` on any error.
Status RunHandshake(Handshake& handshake, int fd, std::chrono::steady_clock::time_point deadline);

// One non-blocking attempt to send what `handshake` has queued over `fd` (EINTR retried).
// kSent: bytes went (call again); kNothing: nothing is queued (read next); kBlocked: the socket
// is full (wait for POLLOUT); kFailed: the connection broke (errno says why).
enum class SendStep : uint8_t { kSent, kNothing, kBlocked, kFailed };
SendStep SendPending(Handshake& handshake, int fd);

// Sends what a denied handshake still has to say (its refusal) without waiting, then reads and
// discards what the peer already sent (bounded), so closing the socket does not reset the
// connection ahead of the refusal. For event-driven callers about to close `fd`.
void FlushRefusal(Handshake& handshake, int fd);

// Logs each refused peer once per address (at warn), not once per attempt: a peer retrying
// with a wrong secret costs one line. Remembers at most kMaxAddresses addresses; past that one
// more line says further refusals go unlogged. Thread contract: thread-safe.
class RefusalLog {
 public:
  static constexpr size_t kMaxAddresses = 1024;

  // `what` names the channel ("rpc server 127.0.0.1:4000"); `address` the peer (a trailing
  // ":port" is ignored, so each connection of one host counts as the same peer).
  void Refused(std::string_view what, std::string_view address, const Status& why);
  // Refusals seen (logged or not).
  uint64_t count() const;

 private:
  mutable Mutex mu_;
  std::set<std::string, std::less<>> seen_ GUARDED_BY(mu_);
  bool overflow_logged_ GUARDED_BY(mu_) = false;
  uint64_t count_ GUARDED_BY(mu_) = 0;
};

}  // namespace ferry::auth
