// GrantConnection: the initiator side of the grant channel (grant_channel.h, grant_wire.h,
// pin_table.h).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "common/log.h"
#include "transport/samehost/grant_channel.h"
#include "transport/samehost/grant_wire.h"
#include "transport/samehost/pin_table.h"

namespace ferry::samehost {
namespace {

using wire::FrameType;

// Thread contract: one caller at a time (see GrantConnection).
class UnixGrantConnection final : public GrantConnection {
 public:
  UnixGrantConnection(UniqueFd fd, std::string path, pid_t peer_pid)
      : fd_(std::move(fd)), path_(std::move(path)), peer_pid_(peer_pid) {
    request_.reserve(wire::kHeaderSize + 4 + 64 * wire::kRangeSize);
  }

  bool TryPin(const RangeRequest& r) override {
    if (broken_ || slot_ == nullptr || leases_.empty()) return false;
    auto it = leases_.upper_bound(r.addr);
    if (it == leases_.begin()) return false;
    --it;
    const CachedLease& lease = it->second;
    if (lease.incarnation != r.incarnation || lease.generation != r.generation ||
        !RangeCovers(lease.addr, lease.length, r.addr, r.length)) {
      return false;
    }
    // Pinned once per batch: the entry cannot drain while this connection's count is held, so
    // the lease pinned through it is the one the entry holds until Release. Another lease of
    // that entry cached here is stale (unregistered since; sequences only grow): forget it.
    if (const uint64_t pinned = pinned_word_[lease.index]; pinned != 0) {
      if (pinned == lease.word) return true;
      leases_.erase(it);
      return false;
    }
    if (!peer_checked_ && !PeerStillThere()) return false;
    peer_checked_ = true;
    std::atomic<uint64_t>& count = slot_->at(lease.index);
    count.fetch_add(1);
    if (table_->at(lease.index).load() != lease.word) {  // closing, or leased anew since
      count.fetch_sub(1);
      leases_.erase(it);
      return false;
    }
    pinned_word_[lease.index] = lease.word;
    pinned_.push_back(lease.index);
    return true;
  }

  Status Acquire(std::span<const RangeRequest> ranges, std::vector<Status>* results,
                 Deadline deadline) override {
    if (broken_) return UnavailableError("grant connection to " + path_ + " is broken");
    if (ranges.empty() || ranges.size() > wire::kMaxRanges) {
      return InvalidArgumentError("grant Acquire takes 1.." + std::to_string(wire::kMaxRanges) +
                                  " ranges, not " + std::to_string(ranges.size()));
    }
    if (!attached_) RETURN_IF_ERROR(Attach(deadline));
    request_.clear();
    const auto payload = static_cast<uint32_t>(4 + ranges.size() * wire::kRangeSize);
    wire::PutHeader(&request_, FrameType::kAcquire, payload);
    wire::PutU32(&request_, static_cast<uint32_t>(ranges.size()));
    for (const RangeRequest& r : ranges) {
      wire::PutU64(&request_, r.addr);
      wire::PutU64(&request_, r.length);
      wire::PutU64(&request_, r.incarnation);
      wire::PutU64(&request_, r.generation);
      wire::PutU64(&request_, wire::EncodeDeadline(r.deadline));
    }
    RETURN_IF_ERROR(Check(wire::SendAll(fd_.get(), request_, deadline)));
    RETURN_IF_ERROR(CheckNotRefused(deadline));
    wire::FrameHeader header;
    RETURN_IF_ERROR(Check(wire::RecvFrame(fd_.get(), deadline, &header, &reply_, nullptr)));
    return ParseAcquireReply(header, ranges, results);
  }

  Status Release() override {
    for (uint32_t index : pinned_) {
      slot_->at(index).fetch_sub(1);
      pinned_word_[index] = 0;
    }
    pinned_.clear();
    peer_checked_ = false;
    if (broken_) return UnavailableError("grant connection to " + path_ + " is broken");
    if (!socket_pins_) return Status::Ok();
    socket_pins_ = false;
    std::string frame;
    wire::PutHeader(&frame, FrameType::kRelease, 0);
    // A release never waits on the target for long: the frame is 8 bytes.
    return Check(wire::SendAll(fd_.get(), frame,
                               std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  }

  Result<int> FetchFd(uint64_t id, Deadline deadline) override {
    if (broken_) return UnavailableError("grant connection to " + path_ + " is broken");
    std::string frame;
    wire::PutHeader(&frame, FrameType::kFetchFd, 8);
    wire::PutU64(&frame, id);
    RETURN_IF_ERROR(Check(wire::SendAll(fd_.get(), frame, deadline)));
    RETURN_IF_ERROR(CheckNotRefused(deadline));
    wire::FrameHeader header;
    UniqueFd received;
    RETURN_IF_ERROR(Check(wire::RecvFrame(fd_.get(), deadline, &header, &reply_, &received)));
    wire::Reader reader(reply_);
    Status answer;
    if (header.type != FrameType::kFetchFdReply || !reader.GetStatus(&answer) ||
        reader.remaining() != 0 || answer.ok() != received.valid()) {
      return BadFrame("malformed FetchFd reply");
    }
    if (!answer.ok()) return answer;
    return received.Release();
  }

  bool broken() const override { return broken_; }
  pid_t peer_pid() const override { return peer_pid_; }

 private:
  // A region lease the target granted (an Acquire reply), for TryPin.
  struct CachedLease {
    uint64_t addr = 0;
    uint64_t length = 0;
    uint64_t incarnation = 0;
    uint64_t generation = 0;
    uint32_t index = 0;
    uint64_t word = 0;  // the entry's table word while this lease is live
  };

  // Maps the target's lease table and this connection's slot (once, before the first Acquire).
  // A target without a table, or a mapping the kernel refuses, leaves the connection on the
  // socket path; only an I/O failure (the connection breaks) is an error.
  Status Attach(Deadline deadline) {
    attached_ = true;
    uint32_t entries = 0;
    UniqueFd table_fd;
    RETURN_IF_ERROR(
        MapRequest(FrameType::kMapTable, FrameType::kMapTableReply, deadline, &entries, &table_fd));
    if (!table_fd.valid()) return Status::Ok();
    Result<std::unique_ptr<pins::SharedWords>> table =
        pins::SharedWords::Map(table_fd.get(), entries, /*writable=*/false);
    if (!table.ok()) {
      FERRY_LOG(kDebug) << "grant channel " << path_ << ": no pin table: " << table.status();
      return Status::Ok();
    }
    uint32_t slot_entries = 0;
    UniqueFd slot_fd;
    RETURN_IF_ERROR(MapRequest(FrameType::kMapSlot, FrameType::kMapSlotReply, deadline,
                               &slot_entries, &slot_fd));
    if (!slot_fd.valid()) return Status::Ok();
    Result<std::unique_ptr<pins::SharedWords>> slot =
        slot_entries == entries ? pins::SharedWords::Map(slot_fd.get(), entries, /*writable=*/true)
                                : Result<std::unique_ptr<pins::SharedWords>>(
                                      InvalidArgumentError("pin slot and table sizes differ"));
    if (!slot.ok()) {
      FERRY_LOG(kDebug) << "grant channel " << path_ << ": no pin slot: " << slot.status();
      return Status::Ok();
    }
    table_ = std::move(table).value();
    slot_ = std::move(slot).value();
    pinned_word_.assign(entries, 0);
    return Status::Ok();
  }

  // One kMapTable / kMapSlot round trip: *fd holds the file the target sent (none when it
  // answered a refusal, e.g. no table).
  Status MapRequest(FrameType type, FrameType reply_type, Deadline deadline, uint32_t* entries,
                    UniqueFd* fd) {
    std::string frame;
    wire::PutHeader(&frame, type, 0);
    RETURN_IF_ERROR(Check(wire::SendAll(fd_.get(), frame, deadline)));
    RETURN_IF_ERROR(CheckNotRefused(deadline));
    wire::FrameHeader header;
    RETURN_IF_ERROR(Check(wire::RecvFrame(fd_.get(), deadline, &header, &reply_, fd)));
    wire::Reader reader(reply_);
    Status answer;
    if (header.type != reply_type || !reader.GetStatus(&answer) || !reader.GetU32(entries) ||
        reader.remaining() != 0 || answer.ok() != fd->valid()) {
      return BadFrame("malformed pin table reply");
    }
    if (!answer.ok()) FERRY_LOG(kDebug) << "grant channel " << path_ << ": " << answer;
    return Status::Ok();
  }

  // False (and the connection broken) when the target hung up: its table may say live for
  // ever once it died.
  bool PeerStillThere() {
    pollfd p{fd_.get(), POLLRDHUP, 0};
    if (::poll(&p, 1, 0) == 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0) return true;
    broken_ = true;
    fd_.Reset();
    return false;
  }

  // Before the first reply is read as a frame: a server that requires authentication (or
  // found ours wrong) answers with a refusal (common/peer_auth.h) instead, which is returned as
  // PermissionDenied; the connection is then broken.
  Status CheckNotRefused(Deadline deadline) {
    if (!first_reply_) return Status::Ok();
    first_reply_ = false;
    RETURN_IF_ERROR(Check(wire::WaitReady(fd_.get(), POLLIN, deadline)));
    uint8_t head[8];
    const ssize_t n = ::recv(fd_.get(), head, sizeof(head), MSG_PEEK | MSG_DONTWAIT);
    if (n < 4) return Status::Ok();  // RecvFrame reads (or fails on) whatever it is
    Status refused =
        auth::RefusalIn(std::span<const uint8_t>(head, static_cast<size_t>(n)), path_);
    if (refused.ok()) return refused;
    broken_ = true;
    fd_.Reset();
    return refused;
  }

  // Marks the connection broken when `s` failed; returns `s`, a bad frame as Unavailable.
  Status Check(Status s) {
    if (s.ok()) return s;
    broken_ = true;
    fd_.Reset();
    if (s.code() == StatusCode::kInvalidArgument) {
      return UnavailableError("grant channel " + path_ + ": " + s.message());
    }
    return s.WithContext("grant channel " + path_);
  }

  Status BadFrame(const std::string& what) { return Check(InvalidArgumentError(what)); }

  Status ParseAcquireReply(const wire::FrameHeader& header, std::span<const RangeRequest> ranges,
                           std::vector<Status>* results) {
    const size_t count = ranges.size();
    wire::Reader reader(reply_);
    Status overall;
    uint32_t n = 0;
    if (header.type != FrameType::kAcquireReply || !reader.GetStatus(&overall) ||
        !reader.GetU32(&n)) {
      return BadFrame("malformed Acquire reply");
    }
    if (!overall.ok()) {
      if (n != 0 || reader.remaining() != 0) return BadFrame("malformed Acquire reply");
      return overall;
    }
    if (n != count) return BadFrame("Acquire reply answers the wrong number of ranges");
    std::vector<Status> out(count);
    std::vector<std::pair<size_t, CachedLease>> leases;
    for (size_t i = 0; i < count; ++i) {
      if (!reader.GetStatus(&out[i])) return BadFrame("malformed Acquire reply");
      if (!out[i].ok()) continue;
      CachedLease lease{.incarnation = ranges[i].incarnation, .generation = ranges[i].generation};
      if (!reader.GetU32(&lease.index) || !reader.GetU64(&lease.word) ||
          !reader.GetU64(&lease.addr) || !reader.GetU64(&lease.length)) {
        return BadFrame("malformed Acquire reply");
      }
      leases.emplace_back(i, lease);
    }
    if (reader.remaining() != 0) return BadFrame("malformed Acquire reply");
    socket_pins_ = socket_pins_ || !leases.empty();  // one per granted range
    if (table_ != nullptr) {
      for (const auto& [i, lease] : leases) {
        if (lease.index == pins::kNoLease || lease.index >= table_->count() ||
            pins::StateOf(lease.word) != pins::kLive) {
          continue;
        }
        if (leases_.size() >= table_->count()) leases_.clear();  // bounded like the table
        leases_[lease.addr] = lease;
      }
    }
    *results = std::move(out);
    return Status::Ok();
  }

  UniqueFd fd_;
  const std::string path_;
  const pid_t peer_pid_;
  bool broken_ = false;
  bool first_reply_ = true;  // no reply read yet (CheckNotRefused)
  std::string request_;
  std::string reply_;
  bool socket_pins_ = false;  // Acquire granted pins since the last Release
  // The shared pin table (pin_table.h); null without one.
  bool attached_ = false;  // Attach ran
  std::unique_ptr<pins::SharedWords> table_;
  std::unique_ptr<pins::SharedWords> slot_;
  std::map<uint64_t, CachedLease> leases_;  // by region start
  std::vector<uint32_t> pinned_;            // entries pinned since Release (one count each)
  // Per entry: the word of the lease pinned through it since Release (never 0: a live word);
  // 0 when not pinned.
  std::vector<uint64_t> pinned_word_;
  bool peer_checked_ = false;  // PeerStillThere ran since Release
};

}  // namespace

Result<std::unique_ptr<GrantConnection>> GrantConnection::Connect(const std::string& path,
                                                                  Deadline deadline,
                                                                  const GrantAuth& auth) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgumentError("grant socket path '" + path + "' is empty or too long");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  // A blocking connect on a Unix socket waits (up to SO_SNDTIMEO) for room in a full backlog;
  // the socket turns non-blocking once connected.
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return UnavailableError("grant socket: " + ErrnoText(errno));
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return TimeoutError("connect to grant socket " + path + ": backlog full until timeout");
    }
    const int64_t us = std::min<int64_t>(left.count(), int64_t{3600} * 1000 * 1000);
    timeval tv{static_cast<time_t>(us / 1000000), static_cast<suseconds_t>(us % 1000000)};
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) != 0) {
      return UnavailableError("grant socket SO_SNDTIMEO: " + ErrnoText(errno));
    }
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) break;
    const int err = errno;
    if (err == EINTR || err == EAGAIN || err == EINPROGRESS) continue;  // re-checks the deadline
    if (err == EACCES || err == EPERM) {
      return PermissionDeniedError("connect to grant socket " + path + ": " + ErrnoText(err));
    }
    return UnavailableError("connect to grant socket " + path + ": " + ErrnoText(err));
  }
  const timeval none{0, 0};
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none)) != 0 || flags < 0 ||
      ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return UnavailableError("grant socket set-up: " + ErrnoText(errno));
  }
  // Who answers: the kernel's record of the listener, which no peer can forge.
  ucred peer{};
  socklen_t peer_size = sizeof(peer);
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &peer_size) != 0) {
    return UnavailableError("grant socket " + path + " SO_PEERCRED: " + ErrnoText(errno));
  }
  if (!auth.secret.empty()) {
    ASSIGN_OR_RETURN(auth::Handshake handshake,
                     auth::Handshake::Client(GrantAuthChannel(auth.transport), auth.secret,
                                             "grant socket " + path));
    RETURN_IF_ERROR(auth::RunHandshake(handshake, fd.get(), deadline));
  }
  return std::unique_ptr<GrantConnection>(
      std::make_unique<UnixGrantConnection>(std::move(fd), path, peer.pid));
}

}  // namespace ferry::samehost
