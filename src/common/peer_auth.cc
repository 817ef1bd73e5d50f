#include "common/peer_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace ferry::auth {
namespace {

constexpr uint8_t kTypeHello = 1;
constexpr uint8_t kTypeChallenge = 2;
constexpr uint8_t kTypeProof = 3;
constexpr uint8_t kTypeRefusal = 4;
constexpr uint8_t kModeHmacSha256 = 1;
constexpr size_t kNonceOffset = 8;
constexpr size_t kMacOffset = kNonceOffset + kNonceSize;
static_assert(kMacOffset + kMacSize == kMessageSize);
constexpr char kMacLabel[] = "ferry-peer-auth-v1";

bool AllZero(std::span<const uint8_t> bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](uint8_t b) { return b == 0; });
}

std::string_view ReasonText(uint8_t reason) {
  switch (static_cast<RefusalReason>(reason)) {
    case RefusalReason::kRequired:
      return "it requires authentication and this peer sent none (no auth secret here?)";
    case RefusalReason::kNoSecret:
      return "it has no auth secret and does not authenticate, but this peer requires "
             "authentication";
    case RefusalReason::kFailed:
      return "it found this peer's authentication wrong (another auth secret?)";
  }
  return "it refused this peer's authentication";
}

}  // namespace

std::string_view ChannelName(Channel channel) {
  switch (channel) {
    case Channel::kRpc:
      return "rpc";
    case Channel::kTcp:
      return "tcp";
    case Channel::kShmGrant:
      return "shm grant";
    case Channel::kCxlGrant:
      return "cxl grant";
  }
  return "unknown";
}

Status ValidateSecret(std::string_view secret) {
  if (!secret.empty() && secret.size() < kMinSecretBytes) {
    return InvalidArgumentError("auth secret must be empty (no authentication) or at least " +
                                std::to_string(kMinSecretBytes) + " bytes, not " +
                                std::to_string(secret.size()));
  }
  return Status::Ok();
}

bool StartsWithMagic(std::span<const uint8_t> bytes) {
  return bytes.size() >= 4 && bytes[0] == 'F' && bytes[1] == 'A' && bytes[2] == 'U' &&
         bytes[3] == 'T';
}

Status RefusalIn(std::span<const uint8_t> first_bytes, std::string_view peer) {
  if (!StartsWithMagic(first_bytes)) return Status::Ok();
  const std::string who = "peer " + std::string(peer);
  if (first_bytes.size() >= 8 && first_bytes[5] == kTypeRefusal) {
    return PermissionDeniedError(who + " refused the connection: " +
                                 std::string(ReasonText(first_bytes[7])));
  }
  return PermissionDeniedError(who + " requires authentication; this peer has no auth secret");
}

// ---- Handshake -----------------------------------------------------------------------------

Handshake::Handshake(Role role, Channel channel, std::string_view secret, std::string peer)
    : role_(role), channel_(channel), secret_(secret), peer_(std::move(peer)) {}

Handshake::~Handshake() {
  if (!secret_.empty()) OPENSSL_cleanse(secret_.data(), secret_.size());
}

Result<Handshake> Handshake::Client(Channel channel, std::string_view secret, std::string peer) {
  RETURN_IF_ERROR(ValidateSecret(secret));
  if (secret.empty()) return InvalidArgumentError("auth client handshake without a secret");
  Handshake h(Role::kClient, channel, secret, std::move(peer));
  RETURN_IF_ERROR(h.Init());
  return h;
}

Result<Handshake> Handshake::Server(Channel channel, std::string_view secret, std::string peer) {
  RETURN_IF_ERROR(ValidateSecret(secret));
  Handshake h(Role::kServer, channel, secret, std::move(peer));
  RETURN_IF_ERROR(h.Init());
  return h;
}

Status Handshake::Init() {
  if (role_ == Role::kClient) {
    if (RAND_bytes(client_nonce_.data(), static_cast<int>(client_nonce_.size())) != 1) {
      return InternalError("auth: the random generator failed (RAND_bytes)");
    }
    Queue(MakeMessage(kTypeHello, kModeHmacSha256, client_nonce_, {}), Step::kReadChallenge);
    return Status::Ok();
  }
  if (!secret_.empty() &&
      RAND_bytes(server_nonce_.data(), static_cast<int>(server_nonce_.size())) != 1) {
    return InternalError("auth: the random generator failed (RAND_bytes)");
  }
  step_ = Step::kReadMagic;
  return Status::Ok();
}

std::span<const uint8_t> Handshake::output() const {
  return std::span<const uint8_t>(out_.data() + out_sent_, out_size_ - out_sent_);
}

void Handshake::Sent(size_t n) {
  out_sent_ += std::min(n, out_size_ - out_sent_);
  if (out_sent_ < out_size_) return;
  out_size_ = out_sent_ = 0;
  if (state_ != State::kRunning) return;
  step_ = after_output_;
  if (step_ == Step::kFinished) Finish();
}

size_t Handshake::want() const {
  if (state_ != State::kRunning || out_size_ > 0) return 0;
  switch (step_) {
    case Step::kReadMagic:
      return 4 - in_got_;
    case Step::kReadChallenge:
    case Step::kReadHello:
    case Step::kReadProof:
      return kMessageSize - in_got_;
    default:
      return 0;
  }
}

void Handshake::Received(std::span<const uint8_t> bytes) {
  const size_t take = std::min(bytes.size(), want());
  if (take > 0) std::memcpy(in_.data() + in_got_, bytes.data(), take);
  in_got_ += take;
  if (step_ == Step::kReadMagic) {
    if (in_got_ < 4) return;
    if (StartsWithMagic(std::span<const uint8_t>(in_.data(), 4))) {
      step_ = Step::kReadHello;  // the rest of the hello
      return;
    }
    if (!secret_.empty()) {
      Deny("peer " + peer_ + " sent no authentication; this peer requires authentication",
           static_cast<uint8_t>(RefusalReason::kRequired));
      return;
    }
    Finish();  // no secret here and none asked for: the bytes belong to the protocol
    return;
  }
  if (in_got_ == kMessageSize) OnMessage();
}

std::span<const uint8_t> Handshake::passthrough() const {
  if (state_ != State::kDone || authenticated_) return {};
  return std::span<const uint8_t>(in_.data(), in_got_);
}

void Handshake::OnMessage() {
  in_got_ = 0;
  const auto& m = in_;
  const std::string who = "peer " + peer_;
  if (!StartsWithMagic(m) || m[4] != kVersion) {
    Deny(who + " failed authentication: not a ferry auth message of version " +
             std::to_string(kVersion),
         static_cast<uint8_t>(RefusalReason::kFailed));
    return;
  }
  if (m[5] == kTypeRefusal) {
    Deny(who + " refused the connection: " + std::string(ReasonText(m[7])), 0);
    return;
  }
  if (m[6] != static_cast<uint8_t>(channel_)) {
    Deny(who + " failed authentication: it speaks for another channel (" +
             std::to_string(m[6]) + ", expected " + std::string(ChannelName(channel_)) + ")",
         static_cast<uint8_t>(RefusalReason::kFailed));
    return;
  }
  switch (step_) {
    case Step::kReadChallenge:
      OnChallenge();
      return;
    case Step::kReadHello:
      OnHello();
      return;
    case Step::kReadProof:
      OnProof();
      return;
    default:
      Deny(who + " failed authentication: unexpected message",
           static_cast<uint8_t>(RefusalReason::kFailed));
  }
}

void Handshake::OnChallenge() {
  const std::span<const uint8_t> m(in_);
  const auto nonce = m.subspan(kNonceOffset, kNonceSize);
  if (m[5] != kTypeChallenge || m[7] != kModeHmacSha256 || AllZero(nonce) ||
      std::equal(nonce.begin(), nonce.end(), client_nonce_.begin())) {
    Deny("peer " + peer_ + " failed authentication: malformed challenge",
         static_cast<uint8_t>(RefusalReason::kFailed));
    return;
  }
  std::copy(nonce.begin(), nonce.end(), server_nonce_.begin());
  // Never prove ourselves to a server that did not prove itself.
  if (!VerifyPeerMac('S', m.subspan(kMacOffset, kMacSize))) return;
  std::array<uint8_t, kMacSize> proof{};
  if (!Mac('C', proof)) {
    Deny("auth: HMAC failed", 0);
    return;
  }
  authenticated_ = true;
  Queue(MakeMessage(kTypeProof, 0, {}, proof), Step::kFinished);
}

void Handshake::OnHello() {
  const std::span<const uint8_t> m(in_);
  const auto nonce = m.subspan(kNonceOffset, kNonceSize);
  if (m[5] != kTypeHello || m[7] != kModeHmacSha256 || AllZero(nonce) ||
      !AllZero(m.subspan(kMacOffset, kMacSize))) {
    Deny("peer " + peer_ + " failed authentication: malformed hello",
         static_cast<uint8_t>(RefusalReason::kFailed));
    return;
  }
  if (secret_.empty()) {
    Deny("peer " + peer_ + " requires authentication; this peer has no auth secret",
         static_cast<uint8_t>(RefusalReason::kNoSecret));
    return;
  }
  std::copy(nonce.begin(), nonce.end(), client_nonce_.begin());
  std::array<uint8_t, kMacSize> mac{};
  if (!Mac('S', mac)) {
    Deny("auth: HMAC failed", 0);
    return;
  }
  Queue(MakeMessage(kTypeChallenge, kModeHmacSha256, server_nonce_, mac), Step::kReadProof);
}

void Handshake::OnProof() {
  const std::span<const uint8_t> m(in_);
  if (m[5] != kTypeProof || m[7] != 0 || !AllZero(m.subspan(kNonceOffset, kNonceSize))) {
    Deny("peer " + peer_ + " failed authentication: malformed proof",
         static_cast<uint8_t>(RefusalReason::kFailed));
    return;
  }
  if (!VerifyPeerMac('C', m.subspan(kMacOffset, kMacSize))) return;
  authenticated_ = true;
  Finish();
}

void Handshake::Deny(std::string why, uint8_t reason) {
  state_ = State::kDenied;
  step_ = Step::kFinished;
  authenticated_ = false;
  error_ = PermissionDeniedError(std::move(why));
  out_size_ = out_sent_ = 0;
  if (reason != 0) {
    out_ = MakeMessage(kTypeRefusal, reason, {}, {});
    out_size_ = kMessageSize;
  }
}

void Handshake::Finish() {
  state_ = State::kDone;
  step_ = Step::kFinished;
}

void Handshake::Queue(const Message& message, Step next) {
  out_ = message;
  out_size_ = kMessageSize;
  out_sent_ = 0;
  after_output_ = next;
  step_ = Step::kFinished;  // nothing to read until it is sent
}

Handshake::Message Handshake::MakeMessage(uint8_t type, uint8_t detail,
                                          std::span<const uint8_t> nonce,
                                          std::span<const uint8_t> mac) const {
  Message m{};
  m[0] = 'F';
  m[1] = 'A';
  m[2] = 'U';
  m[3] = 'T';
  m[4] = kVersion;
  m[5] = type;
  m[6] = static_cast<uint8_t>(channel_);
  m[7] = detail;
  std::copy(nonce.begin(), nonce.end(), m.begin() + kNonceOffset);
  std::copy(mac.begin(), mac.end(), m.begin() + kMacOffset);
  return m;
}

bool Handshake::VerifyPeerMac(char role, std::span<const uint8_t> received) {
  std::array<uint8_t, kMacSize> expected{};
  if (!Mac(role, expected)) {
    Deny("auth: HMAC failed", 0);
    return false;
  }
  if (CRYPTO_memcmp(expected.data(), received.data(), kMacSize) != 0) {
    Deny("peer " + peer_ + " failed authentication (another auth secret?)",
         static_cast<uint8_t>(RefusalReason::kFailed));
    return false;
  }
  return true;
}

bool Handshake::Mac(char role, std::span<uint8_t, kMacSize> out) const {
  std::array<uint8_t, sizeof(kMacLabel) - 1 + 2 + 2 * kNonceSize> data{};
  size_t at = 0;
  std::memcpy(data.data(), kMacLabel, sizeof(kMacLabel) - 1);
  at += sizeof(kMacLabel) - 1;
  data[at++] = static_cast<uint8_t>(channel_);
  data[at++] = static_cast<uint8_t>(role);
  std::copy(client_nonce_.begin(), client_nonce_.end(), data.begin() + at);
  at += kNonceSize;
  std::copy(server_nonce_.begin(), server_nonce_.end(), data.begin() + at);
  unsigned int length = 0;
  const unsigned char* mac =
      HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()), data.data(),
           data.size(), out.data(), &length);
  return mac != nullptr && length == kMacSize;
}

// ---- Drivers --------------------------------------------------------------------------------

SendStep SendPending(Handshake& handshake, int fd) {
  for (;;) {
    const std::span<const uint8_t> out = handshake.output();
    if (out.empty()) return SendStep::kNothing;
    const ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      handshake.Sent(static_cast<size_t>(n));
      return SendStep::kSent;
    }
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? SendStep::kBlocked : SendStep::kFailed;
  }
}

Status RunHandshake(Handshake& handshake, int fd, std::chrono::steady_clock::time_point deadline) {
  const auto broken = [&](const std::string& why) {
    return UnavailableError("authentication with peer " + handshake.peer() + " failed: " + why);
  };
  for (;;) {
    short events = 0;
    const SendStep sent = SendPending(handshake, fd);
    if (sent == SendStep::kSent) continue;
    if (sent == SendStep::kFailed) {
      if (handshake.denied()) return handshake.error();
      return broken("send: " + ErrnoText(errno));
    }
    if (sent == SendStep::kBlocked) {
      events = POLLOUT;
    } else if (handshake.denied()) {
      return handshake.error();
    } else if (handshake.done()) {
      return Status::Ok();
    } else {
      std::array<uint8_t, kMessageSize> buf{};
      const ssize_t n = ::recv(fd, buf.data(), std::min(buf.size(), handshake.want()),
                               MSG_DONTWAIT);
      if (n > 0) {
        handshake.Received(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)));
        continue;
      }
      if (n == 0) return broken("the connection closed during the handshake");
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return broken("recv: " + ErrnoText(errno));
      events = POLLIN;
    }
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      if (handshake.denied()) return handshake.error();
      return TimeoutError("authentication handshake did not finish in time");
    }
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 3'600'000)));
    if (rc < 0 && errno != EINTR) return broken("poll: " + ErrnoText(errno));
  }
}

void FlushRefusal(Handshake& handshake, int fd) {
  while (!handshake.output().empty()) {
    const std::span<const uint8_t> out = handshake.output();
    const ssize_t n = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) break;  // a fresh connection's buffer takes 72 bytes; otherwise give up
    handshake.Sent(static_cast<size_t>(n));
  }
  // Unread input makes close() reset the connection, which may discard the refusal in flight.
  constexpr size_t kMaxDiscard = 256 * 1024;
  char scratch[4096];
  for (size_t discarded = 0; discarded < kMaxDiscard;) {
    const ssize_t n = ::recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT);
    if (n <= 0 && !(n < 0 && errno == EINTR)) break;
    if (n > 0) discarded += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
}

// ---- RefusalLog ----------------------------------------------------------------------------

void RefusalLog::Refused(std::string_view what, std::string_view address, const Status& why) {
  std::string_view host = address;
  if (const size_t colon = host.rfind(':');
      colon != std::string_view::npos && colon + 1 < host.size() &&
      host.find_first_not_of("0123456789", colon + 1) == std::string_view::npos) {
    host = host.substr(0, colon);  // "1.2.3.4:5" and "[::1]:5" without the port
  }
  bool log = false;
  bool overflow = false;
  {
    MutexLock lock(mu_);
    ++count_;
    if (seen_.size() < kMaxAddresses) {
      log = seen_.emplace(host).second;  // once per address
    } else if (!seen_.contains(host) && !overflow_logged_) {
      overflow_logged_ = true;
      overflow = true;
    }
  }
  if (log) {
    FERRY_LOG(kWarn) << what << ": refused " << address << ": " << why.message()
                     << " (further refusals of this peer are not logged)";
  } else if (overflow) {
    FERRY_LOG(kWarn) << what << ": refused " << address << ": " << why.message() << "; "
                     << kMaxAddresses
                     << " peers were refused already, further refusals are not logged";
  }
}

uint64_t RefusalLog::count() const {
  MutexLock lock(mu_);
  return count_;
}

}  // namespace ferry::auth
