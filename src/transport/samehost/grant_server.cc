// GrantServer: the target side of the grant channel (grant_channel.h, grant_wire.h). One accept
// thread and one thread per connection; every thread waits in poll on its socket and on an
// eventfd that the destructor makes readable, so stopping is prompt. A connection thread that
// ends signals another eventfd, and the accept thread joins it at once. A drainer thread frees
// the lease table's entries that were revoked (or closed by the destructor) once no slot pins
// them (pin_table.h).
#include <dirent.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "common/peer_auth.h"
#include "transport/samehost/grant_channel.h"
#include "transport/samehost/grant_wire.h"
#include "transport/samehost/pin_table.h"

namespace ferry::samehost {
namespace {

using wire::FrameType;

constexpr size_t kMaxConnections = 1024;  // more are closed at once
// An initiator holds at most one Acquire's pins at a time; a few more are tolerated, more are
// refused (Again) so one connection cannot pile up pins (and memory) without releasing.
constexpr size_t kMaxHeldPinsPerConnection = 4 * wire::kMaxRanges;
constexpr size_t kRecvChunk = 64 * 1024;
// How often the drainer looks again at a closing entry that a slot still pins: from kPollMin,
// doubling to kPollMax (the initiator does not signal its unpin; unregister is rare).
constexpr auto kPollMin = std::chrono::microseconds(50);
constexpr auto kPollMax = std::chrono::milliseconds(2);
// Bounds the drainer's wait with nothing closing (revocations and closes wake it sooner).
constexpr auto kDrainerIdle = std::chrono::hours(1);

using Clock = std::chrono::steady_clock;

std::string RandomHex() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(v));
  return text;
}

// One accepted connection. `fd` is closed only after `thread` was joined, so other threads may
// shutdown() it meanwhile.
struct ServerConnection {
  UniqueFd fd;
  std::thread thread;
  std::atomic<bool> done{false};
};

// What one connection holds, owned by its thread: its Acquire pins and its pin slot.
struct ConnectionPins {
  std::vector<AccessPin> pins;
  std::unique_ptr<pins::SharedWords> slot;  // once the initiator asked for it (kMapSlot)
};

// One entry of the lease table, host side. `revoked` is set by the registry's revocation (any
// thread); the rest is guarded by the server's table_mu_.
struct LeaseEntry {
  bool used = false;      // leased, or being leased
  uint64_t sequence = 0;  // of the entry's current (or last) lease
  uint64_t addr = 0;      // the leased region and the identity it was leased for
  uint64_t length = 0;
  uint64_t incarnation = 0;
  uint64_t generation = 0;
  AccessPin lease;  // the context's lease; released once the entry drained
  std::atomic<bool> revoked{false};
};

// What an Acquire reply says of a granted range's lease.
struct LeaseAnswer {
  uint32_t index = pins::kNoLease;
  uint64_t word = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
};

// Thread contract: see GrantServer.
class UnixGrantServer final : public GrantServer {
 public:
  UnixGrantServer(TransportContext* ctx, Options options, std::string path, UniqueFd listen_fd,
                  UniqueFd wake_fd, UniqueFd reap_fd, std::unique_ptr<pins::SharedWords> table)
      : ctx_(ctx),
        options_(std::move(options)),
        path_(std::move(path)),
        listen_fd_(std::move(listen_fd)),
        wake_fd_(std::move(wake_fd)),
        reap_fd_(std::move(reap_fd)),
        table_(std::move(table)),
        entries_(table_ != nullptr ? new LeaseEntry[table_->count()] : nullptr) {
    if (table_ == nullptr) return;
    MutexLock lock(table_mu_);
    for (size_t i = table_->count(); i > 0; --i) free_.push_back(static_cast<uint32_t>(i - 1));
  }

  ~UnixGrantServer() override {
    Drain();
    const uint64_t one = 1;
    if (::write(wake_fd_.get(), &one, sizeof(one)) < 0) {
      FERRY_LOG(kWarn) << "grant server wake: " << ErrnoText(errno);
    }
    if (accept_thread_.joinable()) accept_thread_.join();
    std::list<std::unique_ptr<ServerConnection>> conns;
    {
      MutexLock lock(mu_);
      // Wakes a thread blocked sending a reply; its fd stays open until joined.
      for (auto& c : conns_) ::shutdown(c->fd.get(), SHUT_RDWR);
      conns.swap(conns_);
    }
    for (auto& c : conns) c->thread.join();
    StopDrainer();
    ::unlink(path_.c_str());
  }

  void StartAccepting() {
    if (table_ != nullptr) drainer_ = std::thread([this] { DrainLoop(); });
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }

  const std::string& path() const override { return path_; }
  int held_pins() const override { return held_pins_.load(std::memory_order_acquire); }
  int leased_regions() const override { return leased_.load(std::memory_order_acquire); }
  uint64_t bad_frames() const override { return bad_frames_.load(std::memory_order_relaxed); }
  uint64_t auth_refusals() const override { return refusals_.count(); }

 private:
  // Refuses new grants, closes every lease table entry, and waits (bounded) for the pins held,
  // socket and slot alike, to be released.
  void Drain() {
    draining_.store(true);  // seq_cst: LeaseFor's check after publishing an entry sees it
    if (table_ != nullptr) {
      std::vector<uint32_t> closed;
      for (size_t i = 0; i < table_->count(); ++i) {
        if (CloseEntry(static_cast<uint32_t>(i))) closed.push_back(static_cast<uint32_t>(i));
      }
      Closing(closed);
    }
    const auto deadline = std::chrono::steady_clock::now() + options_.drain_timeout;
    int left = 0;
    {
      MutexLock lock(drain_mu_);
      while ((left = held_pins_.load() + leased_.load()) > 0 &&
             std::chrono::steady_clock::now() < deadline) {
        (void)drained_cv_.WaitUntil(drain_mu_, deadline);
      }
    }
    if (left > 0) {
      FERRY_LOG(kWarn) << "grant server " << path_ << ": " << left
                       << " pins not released within the drain timeout; closing anyway";
    }
  }

  bool Stopping() const {
    pollfd p{wake_fd_.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

  void AcceptLoop() {
    pollfd fds[3] = {
        {listen_fd_.get(), POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}, {reap_fd_.get(), POLLIN, 0}};
    for (;;) {
      const int n = ::poll(fds, 3, -1);  // the wake eventfd ends the wait at destruction
      if (n < 0 && errno != EINTR) {
        FERRY_LOG(kError) << "grant server " << path_ << " poll: " << ErrnoText(errno);
        return;
      }
      if (n <= 0) continue;
      if ((fds[1].revents & POLLIN) != 0) return;
      if ((fds[2].revents & POLLIN) != 0) {
        uint64_t count = 0;
        (void)!::read(reap_fd_.get(), &count, sizeof(count));
        ReapFinished();
      }
      if ((fds[0].revents & POLLIN) == 0) continue;
      UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!fd.valid()) {
        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
          FERRY_LOG(kWarn) << "grant server " << path_ << " accept: " << ErrnoText(errno);
        }
        continue;
      }
      Admit(std::move(fd));
    }
  }

  void Admit(UniqueFd fd) {
    MutexLock lock(mu_);
    if (conns_.size() >= kMaxConnections) {
      FERRY_LOG(kWarn) << "grant server " << path_ << ": " << kMaxConnections
                       << " connections already served; closing a new one";
      return;
    }
    auto conn = std::make_unique<ServerConnection>();
    conn->fd = std::move(fd);
    ServerConnection* raw = conn.get();
    conns_.push_back(std::move(conn));
    raw->thread = std::thread([this, raw] { Serve(raw); });
  }

  void ReapFinished() {
    std::list<std::unique_ptr<ServerConnection>> finished;
    {
      MutexLock lock(mu_);
      for (auto it = conns_.begin(); it != conns_.end();) {
        if ((*it)->done.load(std::memory_order_acquire)) {
          finished.splice(finished.end(), conns_, it++);
        } else {
          ++it;
        }
      }
    }
    for (auto& c : finished) c->thread.join();
  }

  // The connection's loop: reads frames, answers them, and lets its pins go when it ends.
  void Serve(ServerConnection* conn) {
    ConnectionPins held;
    try {
      std::string first;  // what the handshake read of the first frame (no secret here)
      if (Authenticate(conn->fd.get(), &first)) {
        ServeFrames(conn->fd.get(), std::move(first), &held);
      }
    } catch (const std::exception& e) {
      FERRY_LOG(kError) << "grant server " << path_ << ": connection failed: " << e.what();
    } catch (...) {
      FERRY_LOG(kError) << "grant server " << path_ << ": connection failed";
    }
    DropPins(&held.pins);
    DropSlot(&held.slot);
    ::shutdown(conn->fd.get(), SHUT_RDWR);
    conn->done.store(true, std::memory_order_release);
    const uint64_t one = 1;
    (void)!::write(reap_fd_.get(), &one, sizeof(one));  // the accept thread joins this one
  }

  void DropPins(std::vector<AccessPin>* pins) {
    const auto n = static_cast<int>(pins->size());
    if (n == 0) return;
    pins->clear();  // releases each pin
    held_pins_.fetch_sub(n);
    if (draining_.load()) {  // seq_cst with Drain's store and load: no wake-up is lost
      MutexLock lock(drain_mu_);
      drained_cv_.NotifyAll();
    }
  }

  // Runs the server side of the handshake (common/peer_auth.h). With a secret it must finish
  // within reply_timeout; without one it only waits for the first frame's first bytes (which
  // it hands back in `first`) and refuses a peer that asks to authenticate. False: refused or
  // gone (a refusal is logged once per peer process); close the connection.
  bool Authenticate(int fd, std::string* first) {
    ucred cred{};
    socklen_t cred_size = sizeof(cred);
    const std::string peer =
        ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_size) == 0
            ? "pid " + std::to_string(cred.pid) + " (uid " + std::to_string(cred.uid) + ")"
            : "an unknown process";
    Result<auth::Handshake> handshake = auth::Handshake::Server(
        GrantAuthChannel(options_.transport), options_.auth_secret, peer);
    if (!handshake.ok()) {
      FERRY_LOG(kError) << "grant server " << path_ << ": " << handshake.status();
      return false;
    }
    const Deadline deadline = handshake->has_secret()
                                  ? std::chrono::steady_clock::now() + options_.reply_timeout
                                  : Deadline::max();  // as an idle connection, until a frame
    const Status s = auth::RunHandshake(*handshake, fd, deadline);
    if (s.ok()) {
      const std::span<const uint8_t> bytes = handshake->passthrough();
      first->assign(bytes.begin(), bytes.end());
      return true;
    }
    if (s.code() == StatusCode::kPermissionDenied || s.code() == StatusCode::kTimeout) {
      if (s.code() == StatusCode::kPermissionDenied) auth::FlushRefusal(*handshake, fd);
      refusals_.Refused("grant server " + path_, peer, s);
    }
    return false;
  }

  // `in`: the first bytes of the first frame, already read (at most 4: never a whole frame).
  void ServeFrames(int fd, std::string in, ConnectionPins* held) {
    size_t consumed = 0;  // bytes of `in` already handled
    pollfd fds[2] = {{fd, POLLIN, 0}, {wake_fd_.get(), POLLIN, 0}};
    for (;;) {
      const int n = ::poll(fds, 2, -1);  // the wake eventfd ends the wait at destruction
      if (n < 0 && errno != EINTR) return;
      if ((fds[1].revents & POLLIN) != 0) return;
      if (n <= 0) continue;
      const size_t old = in.size();
      in.resize(old + kRecvChunk);
      const ssize_t got = ::recv(fd, in.data() + old, kRecvChunk, MSG_DONTWAIT);
      if (got == 0) return;  // the initiator closed
      if (got < 0) {
        in.resize(old);
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        return;
      }
      in.resize(old + static_cast<size_t>(got));
      if (!HandleFrames(fd, in, &consumed, held)) return;
      in.erase(0, consumed);
      consumed = 0;
    }
  }

  // Handles every complete frame in `in` from `*consumed` on. False: close the connection.
  bool HandleFrames(int fd, const std::string& in, size_t* consumed, ConnectionPins* held) {
    while (in.size() - *consumed >= wire::kHeaderSize) {
      const auto* head = reinterpret_cast<const uint8_t*>(in.data() + *consumed);
      Result<wire::FrameHeader> header = wire::ParseHeader(head);
      if (!header.ok()) return BadFrame(header.status().message());
      const size_t total = wire::kHeaderSize + header->payload_length;
      if (in.size() - *consumed < total) return true;  // wait for the rest
      std::string_view payload(in.data() + *consumed + wire::kHeaderSize, header->payload_length);
      *consumed += total;
      if (!HandleFrame(fd, header->type, payload, held)) return false;
    }
    return true;
  }

  bool HandleFrame(int fd, FrameType type, std::string_view payload, ConnectionPins* held) {
    switch (type) {
      case FrameType::kAcquire:
        return HandleAcquire(fd, payload, held);
      case FrameType::kRelease:
        if (!payload.empty()) return BadFrame("Release with a payload");
        DropPins(&held->pins);
        return true;
      case FrameType::kFetchFd:
        return HandleFetchFd(fd, payload);
      case FrameType::kMapTable:
        if (!payload.empty()) return BadFrame("MapTable with a payload");
        return HandleMapTable(fd);
      case FrameType::kMapSlot:
        if (!payload.empty()) return BadFrame("MapSlot with a payload");
        return HandleMapSlot(fd, held);
      default:
        return BadFrame("a reply frame sent to the server");
    }
  }

  bool HandleAcquire(int fd, std::string_view payload, ConnectionPins* held) {
    wire::Reader reader(payload);
    uint32_t count = 0;
    if (!reader.GetU32(&count) || count == 0 || count > wire::kMaxRanges ||
        reader.remaining() != size_t{count} * wire::kRangeSize) {
      return BadFrame("malformed Acquire");
    }
    std::string reply;
    wire::PutHeader(&reply, FrameType::kAcquireReply, 0);
    if (draining_.load(std::memory_order_acquire)) {
      wire::PutStatus(&reply, UnavailableError("grant server " + path_ + " is stopping"));
      wire::PutU32(&reply, 0);
      return SendReply(fd, &reply, -1);
    }
    if (count > options_.max_ranges_per_acquire) {
      wire::PutStatus(&reply,
                      InvalidArgumentError("grant Acquire of " + std::to_string(count) +
                                           " ranges exceeds the server's limit of " +
                                           std::to_string(options_.max_ranges_per_acquire)));
      wire::PutU32(&reply, 0);
      return SendReply(fd, &reply, -1);
    }
    wire::PutStatus(&reply, Status::Ok());
    wire::PutU32(&reply, count);
    // One clock reading for the request: a range whose deadline passed before the request was
    // read is refused, so a target that was frozen never starts an access that is too late.
    const auto now = std::chrono::steady_clock::now();
    for (uint32_t i = 0; i < count; ++i) {
      RangeRequest r;
      uint64_t deadline = wire::kNoDeadline;
      (void)(reader.GetU64(&r.addr) && reader.GetU64(&r.length) && reader.GetU64(&r.incarnation) &&
             reader.GetU64(&r.generation) && reader.GetU64(&deadline));
      r.deadline = wire::DecodeDeadline(deadline);
      if (r.deadline <= now) {
        wire::PutStatus(&reply, TimeoutError("the deadline passed before the target read the "
                                             "grant request"));
        continue;
      }
      const Status pinned = Pin(r, &held->pins);
      wire::PutStatus(&reply, pinned);
      if (!pinned.ok()) continue;
      const LeaseAnswer lease = held->slot != nullptr ? LeaseFor(r) : LeaseAnswer{};
      wire::PutU32(&reply, lease.index);
      wire::PutU64(&reply, lease.word);
      wire::PutU64(&reply, lease.addr);
      wire::PutU64(&reply, lease.length);
    }
    return SendReply(fd, &reply, -1);
  }

  // ---- the lease table (pin_table.h) ----

  bool HandleMapTable(int fd) {
    std::string reply;
    wire::PutHeader(&reply, FrameType::kMapTableReply, 0);
    if (table_ == nullptr) {
      wire::PutStatus(&reply, NotFoundError("grant server " + path_ + " has no lease table"));
      wire::PutU32(&reply, 0);
      return SendReply(fd, &reply, -1);
    }
    wire::PutStatus(&reply, Status::Ok());
    wire::PutU32(&reply, static_cast<uint32_t>(table_->count()));
    return SendReply(fd, &reply, table_->fd());
  }

  // Makes the connection's slot (once) and sends its fd.
  bool HandleMapSlot(int fd, ConnectionPins* held) {
    std::string reply;
    wire::PutHeader(&reply, FrameType::kMapSlotReply, 0);
    Status made = table_ == nullptr ? NotFoundError("grant server " + path_ + " has no lease table")
                  : held->slot != nullptr ? InvalidArgumentError("this connection has a pin slot")
                                          : Status::Ok();
    if (made.ok()) {
      Result<std::unique_ptr<pins::SharedWords>> slot =
          pins::SharedWords::Create("ferry-pin-slot", table_->count(), /*peers_read_only=*/false);
      if (slot.ok()) {
        held->slot = std::move(slot).value();
        MutexLock lock(table_mu_);
        slots_.push_back(held->slot.get());
      } else {
        made = slot.status();
      }
    }
    wire::PutStatus(&reply, made);
    wire::PutU32(&reply, made.ok() ? static_cast<uint32_t>(table_->count()) : 0);
    return SendReply(fd, &reply, made.ok() ? held->slot->fd() : -1);
  }

  // Forgets a closed connection's slot: whatever it pinned is released with it.
  void DropSlot(std::unique_ptr<pins::SharedWords>* slot) {
    if (*slot == nullptr) return;
    {
      MutexLock lock(table_mu_);
      std::erase(slots_, slot->get());
    }
    slot->reset();
    Poke();  // an entry waiting for this slot's pins may drain now
  }

  // The entry leasing the region around `r` for r's identity, if one is live.
  LeaseAnswer FindLiveLocked(const RangeRequest& r) REQUIRES(table_mu_) {
    auto it = live_.upper_bound(r.addr);
    if (it == live_.begin()) return {};
    --it;
    const LeaseEntry& e = entries_[it->second];
    const uint64_t word = table_->at(it->second).load();
    if (pins::StateOf(word) != pins::kLive || e.incarnation != r.incarnation ||
        e.generation != r.generation || !RangeCovers(e.addr, e.length, r.addr, r.length)) {
      return {};
    }
    return {it->second, word, e.addr, e.length};
  }

  // A lease of the region around `r` (just pinned through the context, so it checks out):
  // the live entry leasing it, or a new one. None when the table is full or stopping, or when the
  // context does not lease.
  LeaseAnswer LeaseFor(const RangeRequest& r) {
    uint32_t index = 0;
    uint64_t sequence = 0;
    {
      MutexLock lock(table_mu_);
      if (draining_.load()) return {};
      if (LeaseAnswer found = FindLiveLocked(r); found.index != pins::kNoLease) return found;
      if (free_.empty()) return {};
      index = free_.back();
      free_.pop_back();
      LeaseEntry& e = entries_[index];
      e.used = true;
      e.revoked.store(false);
      sequence = ++e.sequence;
    }
    Result<RegionLease> lease =
        ctx_->LeaseRemoteRegion(r.addr, r.length, r.incarnation, r.generation, options_.transport,
                                [this, index] { Revoked(index); });
    LeaseAnswer other;
    {
      MutexLock lock(table_mu_);
      LeaseEntry& e = entries_[index];
      if (lease.ok() && !draining_.load() && (other = FindLiveLocked(r)).index == pins::kNoLease) {
        e.addr = lease->region_addr;
        e.length = lease->region_length;
        e.incarnation = r.incarnation;
        e.generation = r.generation;
        e.lease = std::move(lease->pin);
        leased_.fetch_add(1);
        const uint64_t word = pins::Word(sequence, pins::kLive);
        table_->at(index).store(word);
        // Revoked before it was published, or destruction began (its Drain may have passed
        // this entry while it was free: seq_cst on both sides, so one of us sees the other):
        // closed at once, for the drainer to free.
        if (e.revoked.load() || draining_.load()) {
          if (CloseEntry(index)) Closing({&index, 1});
          return {};
        }
        live_[e.addr] = index;
        return {index, word, e.addr, e.length};
      }
    }
    // Not kept (refused, stopping, or another connection won). The lease is released before
    // the entry is freed, so its revocation cannot reach whichever lease takes the entry next.
    if (lease.ok()) lease->pin.Release();
    MutexLock lock(table_mu_);
    entries_[index].used = false;
    free_.push_back(index);
    return other;
  }

  // kLive -> kClosing for entry `i`; any thread, no lock. True when this call made the change
  // (once per lease: the caller then hands the entry to the drainer with Closing).
  bool CloseEntry(uint32_t i) {
    std::atomic<uint64_t>& word = table_->at(i);
    uint64_t now = word.load();
    while (pins::StateOf(now) == pins::kLive) {
      if (word.compare_exchange_weak(now, (now & ~pins::kStateMask) | pins::kClosing)) {
        return true;
      }
    }
    return false;
  }

  // The context's revocation of entry `i`'s lease (its region started closing). Runs with a
  // registry lock held: touches atomics and the drainer's leaf lock only.
  void Revoked(uint32_t i) {
    entries_[i].revoked.store(true);
    if (CloseEntry(i)) Closing({&i, 1});
  }

  // Hands entries just closed (CloseEntry true) to the drainer, which looks at these only.
  void Closing(std::span<const uint32_t> closed) {
    if (closed.empty()) return;
    MutexLock lock(wake_mu_);
    closing_.insert(closing_.end(), closed.begin(), closed.end());
    poked_ = true;
    wake_cv_.NotifyAll();
  }

  void Poke() {
    MutexLock lock(wake_mu_);
    poked_ = true;
    wake_cv_.NotifyAll();
  }

  // The drainer: frees the closing entries (closing_) once no slot pins them, looking again
  // (with backoff) at those still pinned, and at nothing else.
  void DrainLoop() {
    Clock::duration backoff = kPollMin;
    bool pending = false;
    std::vector<uint32_t> closing;
    for (;;) {
      {
        MutexLock lock(wake_mu_);
        const auto until = Clock::now() + (pending ? backoff : Clock::duration(kDrainerIdle));
        while (!poked_ && !drainer_stop_ && Clock::now() < until) {
          (void)wake_cv_.WaitUntil(wake_mu_, until);
        }
        if (drainer_stop_) return;
        poked_ = false;
        closing.insert(closing.end(), closing_.begin(), closing_.end());
        closing_.clear();
      }
      const bool was_pending = pending;
      pending = FreeDrainedEntries(&closing);
      backoff = pending && was_pending ? std::min<Clock::duration>(backoff * 2, kPollMax)
                                       : Clock::duration(kPollMin);
    }
  }

  // Frees each entry of `closing` that no live slot pins, releasing its lease; keeps the ones
  // still pinned in `closing`. True when one is.
  bool FreeDrainedEntries(std::vector<uint32_t>* closing) {
    std::vector<AccessPin> released;
    std::vector<uint32_t> freed;
    {
      MutexLock lock(table_mu_);
      std::vector<uint32_t> still_pinned;
      for (uint32_t i : *closing) {
        LeaseEntry& e = entries_[i];
        // Each lease is handed over once, when it closes, and stays closing until freed here.
        if (!e.used || !e.lease.held() || pins::StateOf(table_->at(i).load()) != pins::kClosing) {
          continue;
        }
        if (PinnedLocked(i)) {
          still_pinned.push_back(i);
          continue;
        }
        auto it = live_.find(e.addr);
        if (it != live_.end() && it->second == i) live_.erase(it);
        table_->at(i).store(pins::Word(e.sequence, pins::kFree));
        released.push_back(std::move(e.lease));
        freed.push_back(i);
      }
      closing->swap(still_pinned);
    }
    const bool pending = !closing->empty();
    if (freed.empty()) return pending;
    released.clear();  // outside the lock: releasing calls the context
    {
      // Only now may an entry be leased again: its old lease can no longer be revoked.
      MutexLock lock(table_mu_);
      for (uint32_t i : freed) {
        entries_[i].used = false;
        free_.push_back(i);
      }
    }
    leased_.fetch_sub(static_cast<int>(freed.size()));
    if (draining_.load()) {
      MutexLock lock(drain_mu_);
      drained_cv_.NotifyAll();
    }
    return pending;
  }

  // Whether any live slot pins entry `i` (seq_cst loads, after the entry's kClosing store).
  bool PinnedLocked(uint32_t i) REQUIRES(table_mu_) {
    for (const pins::SharedWords* slot : slots_) {
      if (slot->at(i).load() != 0) return true;
    }
    return false;
  }

  // Stops the drainer and releases the leases left (destruction, after every connection ended
  // and the drain wait ran out or succeeded).
  void StopDrainer() {
    if (table_ == nullptr) return;
    {
      MutexLock lock(wake_mu_);
      drainer_stop_ = true;
      wake_cv_.NotifyAll();
    }
    if (drainer_.joinable()) drainer_.join();
    std::vector<AccessPin> released;
    {
      MutexLock lock(table_mu_);
      for (size_t i = 0; i < table_->count(); ++i) {
        if (entries_[i].lease.held()) released.push_back(std::move(entries_[i].lease));
      }
      live_.clear();
    }
    leased_.fetch_sub(static_cast<int>(released.size()));
  }

  Status Pin(const RangeRequest& r, std::vector<AccessPin>* pins) {
    if (pins->size() >= kMaxHeldPinsPerConnection) {
      return AgainError("grant connection holds too many pins; release first");
    }
    Result<AccessPin> pin =
        ctx_->PinRemoteAccess(r.addr, r.length, r.incarnation, r.generation, options_.transport);
    if (!pin.ok()) return pin.status();
    pins->push_back(std::move(pin).value());
    held_pins_.fetch_add(1, std::memory_order_acq_rel);
    return Status::Ok();
  }

  bool HandleFetchFd(int fd, std::string_view payload) {
    wire::Reader reader(payload);
    uint64_t id = 0;
    if (!reader.GetU64(&id) || reader.remaining() != 0) return BadFrame("malformed FetchFd");
    Result<int> found =
        options_.fds ? options_.fds(id) : Result<int>(NotFoundError("no shareable buffers here"));
    std::string reply;
    wire::PutHeader(&reply, FrameType::kFetchFdReply, 0);
    if (found.ok() && *found < 0) found = InternalError("fd lookup returned a negative fd");
    wire::PutStatus(&reply, found.status());
    const bool sent = SendReply(fd, &reply, found.ok() ? *found : -1);
    if (found.ok() && options_.close_fetched_fds) ::close(*found);
    return sent;
  }

  // Fills in the payload length of `reply` (header first) and sends it.
  bool SendReply(int fd, std::string* reply, int pass_fd) {
    const auto n = static_cast<uint32_t>(reply->size() - wire::kHeaderSize);
    for (int i = 0; i < 4; ++i) (*reply)[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
    const Status sent = wire::SendAll(
        fd, *reply, std::chrono::steady_clock::now() + options_.reply_timeout, pass_fd);
    if (!sent.ok() && !Stopping()) {
      FERRY_LOG(kDebug) << "grant server " << path_ << ": reply not sent: " << sent;
    }
    return sent.ok();
  }

  bool BadFrame(const std::string& what) {
    bad_frames_.fetch_add(1, std::memory_order_relaxed);
    FERRY_LOG(kWarn) << "grant server " << path_ << ": bad frame (" << what
                     << "); closing the connection";
    return false;
  }

  TransportContext* const ctx_;
  const Options options_;
  const std::string path_;
  const UniqueFd listen_fd_;
  const UniqueFd wake_fd_;  // eventfd; written once by the destructor, never read
  const UniqueFd reap_fd_;  // eventfd; written by each connection thread as it ends
  std::atomic<int> held_pins_{0};
  std::atomic<int> leased_{0};  // entries holding a lease (LeaseEntry::lease)
  std::atomic<uint64_t> bad_frames_{0};
  auth::RefusalLog refusals_;  // connections refused by the authentication
  std::atomic<bool> draining_{false};  // set once destruction begins
  Mutex drain_mu_;                     // with drained_cv_: Drain waits for held_pins_ to drop
  CondVar drained_cv_;
  Mutex mu_;
  std::list<std::unique_ptr<ServerConnection>> conns_ GUARDED_BY(mu_);
  std::thread accept_thread_;

  // The lease table; both null when Options::lease_table_entries is 0.
  const std::unique_ptr<pins::SharedWords> table_;
  const std::unique_ptr<LeaseEntry[]> entries_;  // table_->count() of them
  Mutex table_mu_;  // never held while calling the context (which may revoke)
  std::vector<uint32_t> free_ GUARDED_BY(table_mu_);                   // entries free to lease
  std::map<uint64_t, uint32_t> live_ GUARDED_BY(table_mu_);            // region start -> its entry
  std::vector<const pins::SharedWords*> slots_ GUARDED_BY(table_mu_);  // of live connections
  Mutex wake_mu_;  // with wake_cv_: wakes the drainer and hands it closing_; a leaf lock
  CondVar wake_cv_;
  bool poked_ GUARDED_BY(wake_mu_) = false;
  // Entries closed (CloseEntry) since the drainer last looked; each lease at most once, so at
  // most table_->count() of them.
  std::vector<uint32_t> closing_ GUARDED_BY(wake_mu_);
  bool drainer_stop_ GUARDED_BY(wake_mu_) = false;
  std::thread drainer_;
};

// True when nothing listens on the Unix socket at `path` any more (connect is refused).
bool NobodyListens(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return false;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return false;
  return ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 &&
         errno == ECONNREFUSED;
}

// Removes the socket files that servers of `transport` left in `dir` when their process died
// without stopping (SIGKILL, a crash): ours by name and owner, older than kSweepMinAge (a
// server binds and listens within microseconds), and refusing connections. A listening server
// is never touched, whatever pid namespace it lives in.
void SweepDeadSockets(const std::string& dir, const std::string& transport) {
  constexpr time_t kSweepMinAge = 60;  // seconds
  constexpr int kMaxEntries = 4096;    // bounds the cost of one Start
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  const std::string prefix = "ferry-" + transport + "-";
  const time_t now = ::time(nullptr);
  int seen = 0;
  int removed = 0;
  while (const dirent* e = ::readdir(d)) {
    if (++seen > kMaxEntries) break;
    const std::string_view name(e->d_name);
    if (name.substr(0, prefix.size()) != prefix || name.size() < prefix.size() + 5 ||
        name.substr(name.size() - 5) != ".sock") {
      continue;
    }
    const std::string path = dir + "/" + std::string(name);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != ::geteuid() ||
        now - st.st_mtime < kSweepMinAge || !NobodyListens(path)) {
      continue;
    }
    if (::unlink(path.c_str()) == 0) ++removed;
  }
  ::closedir(d);
  if (removed > 0) {
    FERRY_LOG(kInfo) << "grant server: removed " << removed << " dead " << transport
                     << " socket files from " << dir;
  }
}

// Binds a fresh path under `dir` (retrying a name already taken), readable by this user only.
Result<std::pair<std::string, UniqueFd>> BindUnique(const std::string& dir,
                                                    const std::string& transport) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string path = dir + "/ferry-" + transport + "-" + std::to_string(::getpid()) + "-" +
                       RandomHex() + ".sock";
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path)) {
      return InvalidArgumentError("grant socket path '" + path + "' is too long (max " +
                                  std::to_string(sizeof(addr.sun_path) - 1) + " bytes)");
    }
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return UnavailableError("grant socket: " + ErrnoText(errno));
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      const int err = errno;
      if (err == EADDRINUSE) continue;
      const std::string what = "bind grant socket " + path + ": " + ErrnoText(err);
      if (err == EACCES || err == EPERM || err == EROFS) return PermissionDeniedError(what);
      if (err == ENOENT || err == ENOTDIR) return InvalidArgumentError(what);
      return UnavailableError(what);
    }
    // Before listen() nobody can connect, so no peer ever sees wider permissions.
    if (::chmod(path.c_str(), 0600) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
      const std::string what = "set up grant socket " + path + ": " + ErrnoText(errno);
      ::unlink(path.c_str());
      return UnavailableError(what);
    }
    return std::make_pair(std::move(path), std::move(fd));
  }
  return UnavailableError("no free grant socket name under " + dir);
}

}  // namespace

Result<std::unique_ptr<GrantServer>> GrantServer::Start(TransportContext* ctx, Options options) {
  if (ctx == nullptr) return InvalidArgumentError("grant server: null context");
  if (options.transport.empty()) return InvalidArgumentError("grant server: no transport name");
  if (options.dir.empty()) return InvalidArgumentError("grant server: no socket directory");
  if (options.max_ranges_per_acquire < 1 || options.max_ranges_per_acquire > wire::kMaxRanges) {
    return InvalidArgumentError("grant server: max_ranges_per_acquire must be 1.." +
                                std::to_string(wire::kMaxRanges));
  }
  RETURN_IF_ERROR(auth::ValidateSecret(options.auth_secret).WithContext("grant server"));
  if (options.lease_table_entries > pins::kMaxEntries) {
    return InvalidArgumentError("grant server: lease_table_entries must be 0.." +
                                std::to_string(pins::kMaxEntries));
  }
  if (options.reply_timeout.count() <= 0 || options.drain_timeout.count() < 0) {
    return InvalidArgumentError("grant server: reply_timeout must be > 0, drain_timeout >= 0");
  }
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  UniqueFd reap(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid() || !reap.valid()) {
    return UnavailableError("grant server eventfd: " + ErrnoText(errno));
  }
  std::unique_ptr<pins::SharedWords> table;
  if (options.lease_table_entries > 0) {
    ASSIGN_OR_RETURN(table,
                     pins::SharedWords::Create("ferry-pin-table", options.lease_table_entries,
                                               /*peers_read_only=*/true));
  }
  SweepDeadSockets(options.dir, options.transport);
  ASSIGN_OR_RETURN(auto bound, BindUnique(options.dir, options.transport));
  auto server = std::make_unique<UnixGrantServer>(ctx, std::move(options), std::move(bound.first),
                                                  std::move(bound.second), std::move(wake),
                                                  std::move(reap), std::move(table));
  server->StartAccepting();
  return std::unique_ptr<GrantServer>(std::move(server));
}

}  // namespace ferry::samehost
