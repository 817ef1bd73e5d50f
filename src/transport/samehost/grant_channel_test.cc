// The grant channel over real Unix sockets: pins held and released, a closed connection's pins
// dropped, bad frames, FetchFd round trips, bounded timeouts and a prompt stop.
#include "transport/samehost/grant_channel.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "common/wait_for.h"
#include "transport/conformance/test_context.h"
#include "transport/samehost/grant_test_fixture.h"
#include "transport/samehost/grant_wire.h"
#include "transport/samehost/pin_table.h"

namespace ferry::samehost {
namespace {

using std::chrono::milliseconds;

uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }

class GrantChannelTest : public GrantServerFixture {
 protected:
  std::unique_ptr<GrantConnection> Connect() {
    Result<std::unique_ptr<GrantConnection>> conn =
        GrantConnection::Connect(server_->path(), kGrantTestTimeout);
    EXPECT_TRUE(conn.ok()) << conn.status();
    return conn.ok() ? std::move(conn).value() : nullptr;
  }

  RangeRequest Range(size_t offset, size_t length, uint64_t generation = 3) {
    return RangeRequest{Addr(region_.data() + offset), length, kGrantTestIncarnation, generation};
  }

  // A raw client socket to the server, for frames the real client never sends.
  int RawConnect() {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, server_->path().c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    timeval tv{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
  }
};

TEST_F(GrantChannelTest, ServesAPrivateSocketUnderTheDirectoryAndRemovesIt) {
  StartServer();
  const std::string path = server_->path();
  EXPECT_EQ(path.rfind(dir_ + "/ferry-shm-" + std::to_string(::getpid()) + "-", 0), 0u) << path;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  server_.reset();
  EXPECT_NE(::stat(path.c_str(), &st), 0);
}

// The lease table (grant_channel.h): a granted range leases its region, and later ranges in it
// pin through shared memory with no message and no new check on the target, but only for the
// generation and bounds leased; revoking the lease (the region closing) ends that at once,
// and the revoked entry drains when the holding connection releases or closes. A full table
// leaves a region on the socket path.
TEST_F(GrantChannelTest, LeasedRegionsPinThroughTheTableUntilRevoked) {
  std::vector<uint8_t> other(4096);
  ctx_.AddRegion(other.data(), other.size(), /*generation=*/3, true, "shm");
  GrantServer::Options options;
  options.lease_table_entries = 1;
  StartServer(options);
  std::unique_ptr<GrantConnection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  EXPECT_FALSE(conn->TryPin(Range(0, 16))) << "pinned before any lease";
  std::vector<Status> results;
  const RangeRequest asked[] = {Range(0, 16), {Addr(other.data()), 16, kGrantTestIncarnation, 3}};
  ASSERT_TRUE(conn->Acquire(asked, &results, kGrantTestTimeout).ok());
  ASSERT_TRUE(results[0].ok() && results[1].ok());
  ASSERT_TRUE(conn->Release().ok());
  EXPECT_EQ(server_->leased_regions(), 1) << "a table of one entry leased two regions";
  EXPECT_FALSE(conn->TryPin(asked[1])) << "the region the full table did not lease";
  const uint64_t checks = ctx_.pin_calls();
  EXPECT_TRUE(conn->TryPin(Range(100, 3996)));
  EXPECT_TRUE(conn->TryPin(Range(0, 4096)));
  EXPECT_FALSE(conn->TryPin(Range(100, 3997))) << "past the leased region's end";
  EXPECT_FALSE(conn->TryPin(Range(0, 16, /*generation=*/4))) << "another generation";
  EXPECT_EQ(ctx_.pin_calls(), checks) << "a table pin asked the target";
  // Revoked while pinned: no new pin, and the lease waits for this connection's pin.
  ASSERT_TRUE(ctx_.CloseRegion(region_.data()));
  std::unique_ptr<GrantConnection> late = Connect();
  ASSERT_NE(late, nullptr);
  const RangeRequest closed[] = {Range(0, 16)};
  EXPECT_TRUE(late->Acquire(closed, &results, kGrantTestTimeout).ok());
  EXPECT_EQ(results[0].code(), StatusCode::kStale) << results[0];
  EXPECT_FALSE(late->TryPin(Range(0, 16)));
  EXPECT_FALSE(ctx_.WaitNoPins(milliseconds(100))) << "the lease drained under a held pin";
  ASSERT_TRUE(conn->Release().ok());
  EXPECT_TRUE(ctx_.WaitNoPins(kGrantTestTimeout)) << "the lease was not released once unpinned";
  EXPECT_FALSE(conn->TryPin(Range(0, 16))) << "pinned a revoked lease";
  // The count drops just after the lease's release (which WaitNoPins saw).
  EXPECT_TRUE(WaitFor([&] { return server_->leased_regions() == 0; }, kGrantTestTimeout));
}

// A lease the initiator still caches for a region that was unregistered must not pin through
// the entry a later lease reuses, even when that later lease was pinned first in the same batch
// (the once-per-batch shortcut). X leased at entry 0 and unregistered (the entry drains and is
// freed); Y leased by the same connection at entry 0 again; a batch with a slice to Y then a
// slice planned against X's old descriptor: the slice to X must go to the target (Stale).
TEST_F(GrantChannelTest, AStaleLeaseAtAReusedEntryIsNotPinnedInTheSameBatch) {
  GrantServer::Options options;
  options.lease_table_entries = 2;
  StartServer(options);
  std::unique_ptr<GrantConnection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  std::vector<Status> results;
  const RangeRequest x[] = {Range(0, 16)};
  ASSERT_TRUE(conn->Acquire(x, &results, kGrantTestTimeout).ok());
  ASSERT_TRUE(results[0].ok()) << results[0];
  ASSERT_TRUE(conn->Release().ok());
  ASSERT_TRUE(ctx_.CloseRegion(region_.data()));  // X unregistered: its entry drains, is freed
  ASSERT_TRUE(ctx_.WaitNoPins(kGrantTestTimeout));
  ASSERT_TRUE(WaitFor([&] { return server_->leased_regions() == 0; }, kGrantTestTimeout));
  std::vector<uint8_t> y(4096);
  ctx_.AddRegion(y.data(), y.size(), /*generation=*/9, true, "shm");
  const RangeRequest yr[] = {{Addr(y.data()), 16, kGrantTestIncarnation, 9}};
  ASSERT_TRUE(conn->Acquire(yr, &results, kGrantTestTimeout).ok());
  ASSERT_TRUE(results[0].ok()) << results[0];
  ASSERT_TRUE(conn->Release().ok());
  ASSERT_EQ(server_->leased_regions(), 1);
  EXPECT_TRUE(conn->TryPin(yr[0])) << "Y's lease does not pin";
  EXPECT_FALSE(conn->TryPin(x[0])) << "a slice to unregistered X pinned through Y's entry";
  EXPECT_TRUE(conn->TryPin(yr[0])) << "Y's lease was dropped with X's";
  ASSERT_TRUE(conn->Release().ok());
  // And in a later batch, the stale lease (forgotten) stays refused.
  EXPECT_FALSE(conn->TryPin(x[0]));
  EXPECT_TRUE(conn->TryPin(yr[0]));
  ASSERT_TRUE(conn->Release().ok());
}

// The initiator trusts a lease only as far as it can check it: a lease reply naming an entry
// past the table's end, or a word that is not live, is ignored (those ranges go to the target
// each time), while a sound one pins. A scripted target (real socket, real memfds) answers.
TEST_F(GrantChannelTest, TheInitiatorIgnoresLeasesOutsideTheTableOrNotLive) {
  constexpr size_t kEntries = 4;
  Result<std::unique_ptr<pins::SharedWords>> table =
      pins::SharedWords::Create("test-table", kEntries, /*peers_read_only=*/true);
  Result<std::unique_ptr<pins::SharedWords>> slot =
      pins::SharedWords::Create("test-slot", kEntries, /*peers_read_only=*/false);
  ASSERT_TRUE(table.ok() && slot.ok());
  const uint64_t live = pins::Word(1, pins::kLive);
  const uint64_t closing = pins::Word(1, pins::kClosing);
  (*table)->at(0).store(live);
  (*table)->at(1).store(closing);  // what a careless initiator would match
  struct Lease {
    uint32_t index;
    uint64_t word;
    uint64_t addr;
  };
  const Lease answers[] = {{0, live, 0x10000}, {1, closing, 0x20000}, {kEntries, live, 0x30000}};

  const std::string path = dir_ + "/scripted.sock";
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  std::thread target([&] {
    pollfd ready{listener, POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(kGrantTestTimeout.count())) != 1) return;
    UniqueFd fd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    const auto deadline = std::chrono::steady_clock::now() + kGrantTestTimeout;
    wire::FrameHeader header;
    std::string payload;
    // Until the initiator closes (or the bound passes): answer each frame as a target would.
    while (fd.valid() && wire::RecvFrame(fd.get(), deadline, &header, &payload, nullptr).ok()) {
      std::string body;
      int pass = -1;
      wire::FrameType type = wire::FrameType::kAcquireReply;
      if (header.type == wire::FrameType::kMapTable || header.type == wire::FrameType::kMapSlot) {
        wire::PutStatus(&body, Status::Ok());
        wire::PutU32(&body, kEntries);
        const bool is_table = header.type == wire::FrameType::kMapTable;
        type = is_table ? wire::FrameType::kMapTableReply : wire::FrameType::kMapSlotReply;
        pass = is_table ? (*table)->fd() : (*slot)->fd();
      } else if (header.type == wire::FrameType::kAcquire) {
        wire::PutStatus(&body, Status::Ok());
        wire::PutU32(&body, static_cast<uint32_t>(std::size(answers)));
        for (const Lease& l : answers) {
          wire::PutStatus(&body, Status::Ok());
          wire::PutU32(&body, l.index);
          wire::PutU64(&body, l.word);
          wire::PutU64(&body, l.addr);
          wire::PutU64(&body, 4096);
        }
      } else {
        continue;  // Release: no reply
      }
      std::string frame;
      wire::PutHeader(&frame, type, static_cast<uint32_t>(body.size()));
      frame += body;
      if (!wire::SendAll(fd.get(), frame, deadline, pass).ok()) break;
    }
  });
  {
    Result<std::unique_ptr<GrantConnection>> conn =
        GrantConnection::Connect(path, kGrantTestTimeout);
    ASSERT_TRUE(conn.ok()) << conn.status();
    std::vector<RangeRequest> asked;
    for (const Lease& l : answers) asked.push_back({l.addr, 16, kGrantTestIncarnation, 3});
    std::vector<Status> results;
    ASSERT_TRUE((*conn)->Acquire(asked, &results, kGrantTestTimeout).ok());
    ASSERT_EQ(results.size(), std::size(answers));
    ASSERT_TRUE((*conn)->Release().ok());
    EXPECT_TRUE((*conn)->TryPin(asked[0])) << "the sound lease does not pin";
    EXPECT_EQ((*slot)->at(0).load(), 1u);
    EXPECT_FALSE((*conn)->TryPin(asked[1])) << "pinned through a lease that was not live";
    EXPECT_FALSE((*conn)->TryPin(asked[2])) << "pinned through an entry past the table";
    EXPECT_EQ((*slot)->at(1).load(), 0u);
    ASSERT_TRUE((*conn)->Release().ok());
    EXPECT_EQ((*slot)->at(0).load(), 0u);
    EXPECT_FALSE((*conn)->broken());
  }
  target.join();
  ::close(listener);
  ::unlink(path.c_str());
}

// The kernel names the process that listens (SO_PEERCRED): here, this one.
TEST_F(GrantChannelTest, AConnectionKnowsThePidThatAnswersIt) {
  StartServer();
  std::unique_ptr<GrantConnection> conn = Connect();
  ASSERT_NE(conn, nullptr);
  EXPECT_EQ(conn->peer_pid(), ::getpid());
}

// A bound socket file with no listener, as a process killed mid-run leaves it; `age` seconds
// old.
void MakeDeadSocket(const std::string& path, int age) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ::close(fd);
  const timespec then{::time(nullptr) - age, 0};
  const timespec times[2] = {then, then};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0);
}

TEST_F(GrantChannelTest, StartRemovesOnlyDeadSocketsOfItsTransport) {
  GrantServer::Options live_options;
  live_options.transport = "shm";
  live_options.dir = dir_;
  Result<std::unique_ptr<GrantServer>> live = GrantServer::Start(&ctx_, live_options);
  ASSERT_TRUE(live.ok());
  const timespec old{::time(nullptr) - 3600, 0};
  const timespec times[2] = {old, old};
  ASSERT_EQ(::utimensat(AT_FDCWD, (*live)->path().c_str(), times, AT_SYMLINK_NOFOLLOW), 0);
  const std::string dead = dir_ + "/ferry-shm-999999-00.sock";
  const std::string young = dir_ + "/ferry-shm-999999-01.sock";  // maybe between bind and listen
  const std::string other = dir_ + "/ferry-cxl-999999-02.sock";
  const std::string foreign = dir_ + "/unrelated.sock";
  MakeDeadSocket(dead, 3600);
  MakeDeadSocket(young, 0);
  MakeDeadSocket(other, 3600);
  MakeDeadSocket(foreign, 3600);
  StartServer();
  struct stat st {};
  EXPECT_NE(::stat(dead.c_str(), &st), 0) << "a dead socket file was left";
  for (const std::string& kept : {young, other, foreign, (*live)->path()}) {
    EXPECT_EQ(::stat(kept.c_str(), &st), 0) << kept << " was removed";
  }
  auto conn = GrantConnection::Connect((*live)->path(), kGrantTestTimeout);
  EXPECT_TRUE(conn.ok()) << "the live server lost its socket";
  for (const std::string& p : {young, other, foreign}) ::unlink(p.c_str());
}

TEST_F(GrantChannelTest, RejectsBadOptions) {
  GrantServer::Options options;
  options.transport = "shm";
  options.dir = dir_ + "/missing";
  EXPECT_EQ(GrantServer::Start(&ctx_, options).status().code(), StatusCode::kInvalidArgument);
  options.dir = dir_;
  options.max_ranges_per_acquire = 0;
  EXPECT_EQ(GrantServer::Start(&ctx_, options).status().code(), StatusCode::kInvalidArgument);
  options.max_ranges_per_acquire = 4096;
  options.transport.clear();
  EXPECT_EQ(GrantServer::Start(&ctx_, options).status().code(), StatusCode::kInvalidArgument);
  options.transport = "shm";
  options.dir = dir_ + "/" + std::string(120, 'x');
  EXPECT_EQ(GrantServer::Start(&ctx_, options).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(GrantServer::Start(nullptr, options).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(GrantChannelTest, AcquirePinsEachRangeAndReleaseLetsThemGo) {
  StartServer();
  auto conn = Connect();
  ASSERT_NE(conn, nullptr);
  uint8_t elsewhere[16];
  const std::vector<RangeRequest> ranges = {
      Range(0, 1024),
      Range(1024, 3072),
      Range(0, 64, /*generation=*/2),                                  // stale generation
      Range(4000, 200),                                                // leaves the region
      {Addr(elsewhere), sizeof(elsewhere), kGrantTestIncarnation, 3},  // nothing registered there
      {Addr(region_.data()), 64, kGrantTestIncarnation + 1, 3},        // another incarnation
  };
  std::vector<Status> results;
  ASSERT_TRUE(conn->Acquire(ranges, &results, kGrantTestTimeout).ok());
  ASSERT_EQ(results.size(), ranges.size());
  EXPECT_TRUE(results[0].ok()) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
  EXPECT_EQ(results[2].code(), StatusCode::kStale);
  EXPECT_EQ(results[2].message(), "generation mismatch");
  EXPECT_EQ(results[3].code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(results[4].code(), StatusCode::kNotFound);
  EXPECT_EQ(results[5].code(), StatusCode::kStale);
  EXPECT_EQ(server_->held_pins(), 2);
  EXPECT_EQ(ctx_.active_pins(), 2);

  ASSERT_TRUE(conn->Release().ok());
  EXPECT_TRUE(ctx_.WaitNoPins(kGrantTestTimeout));
  EXPECT_TRUE(WaitFor([&] { return server_->held_pins() == 0; }, kGrantTestTimeout));
  EXPECT_FALSE(conn->broken());

  // The connection serves the next batch after a release.
  ASSERT_TRUE(
      conn->Acquire(std::vector<RangeRequest>{Range(8, 8)}, &results, kGrantTestTimeout).ok());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].ok());
  EXPECT_EQ(ctx_.active_pins(), 1);
  ASSERT_TRUE(conn->Release().ok());
  EXPECT_TRUE(ctx_.WaitNoPins(kGrantTestTimeout));
}

TEST_F(GrantChannelTest, AClosingRegionIsRefusedAndPinsHeldKeepItFromDraining) {
  StartServer();
  auto conn = Connect();
  std::vector<Status> results;
  ASSERT_TRUE(
      conn->Acquire(std::vector<RangeRequest>{Range(0, 64)}, &results, kGrantTestTimeout).ok());
  ASSERT_TRUE(results[0].ok());
  ASSERT_TRUE(ctx_.CloseRegion(region_.data()));
  EXPECT_FALSE(ctx_.WaitNoPins(milliseconds(50)));  // still held by the connection
  ASSERT_TRUE(
      conn->Acquire(std::vector<RangeRequest>{Range(64, 64)}, &results, kGrantTestTimeout).ok());
  EXPECT_EQ(results[0].code(), StatusCode::kStale);
  ASSERT_TRUE(conn->Release().ok());
  EXPECT_TRUE(ctx_.WaitNoPins(kGrantTestTimeout));
}

TEST_F(GrantChannelTest, AClosedConnectionReleasesItsPins) {
  StartServer();
  auto a = Connect();
  auto b = Connect();
  std::vector<Status> results;
  ASSERT_TRUE(a->Acquire(std::vector<RangeRequest>{Range(0, 64), Range(64, 64)}, &results,
                         kGrantTestTimeout)
                  .ok());
  ASSERT_TRUE(
      b->Acquire(std::vector<RangeRequest>{Range(128, 64)}, &results, kGrantTestTimeout).ok());
  EXPECT_EQ(ctx_.active_pins(), 3);
  a.reset();  // no Release: the server drops a's pins when it sees the close
  EXPECT_TRUE(WaitFor([&] { return server_->held_pins() == 1; }, kGrantTestTimeout));
  EXPECT_EQ(ctx_.active_pins(), 1);
  b.reset();
  EXPECT_TRUE(ctx_.WaitNoPins(kGrantTestTimeout));
  EXPECT_TRUE(WaitFor([&] { return server_->held_pins() == 0; }, kGrantTestTimeout));
}

TEST_F(GrantChannelTest, ARangeWhoseDeadlinePassedIsRefusedAsTimeoutWithoutAPin) {
  StartServer();
  auto conn = Connect();
  RangeRequest late = Range(0, 64);
  late.deadline = std::chrono::steady_clock::now() - milliseconds(1);
  RangeRequest in_time = Range(64, 64);
  in_time.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::vector<Status> results;
  ASSERT_TRUE(conn->Acquire(std::vector<RangeRequest>{late, in_time, Range(128, 64)}, &results,
                            kGrantTestTimeout)
                  .ok());
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].code(), StatusCode::kTimeout) << results[0];
  EXPECT_TRUE(results[1].ok()) << results[1];
  EXPECT_TRUE(results[2].ok()) << results[2];
  EXPECT_EQ(ctx_.pin_calls(), 2u) << "the late range never reached the registry";
  ASSERT_TRUE(conn->Release().ok());
  EXPECT_TRUE(ctx_.WaitNoPins(kGrantTestTimeout));
}

TEST(GrantWireTest, DeadlinesRoundTripAndNoneStaysNone) {
  EXPECT_EQ(wire::EncodeDeadline(Deadline::max()), wire::kNoDeadline);
  EXPECT_EQ(wire::DecodeDeadline(wire::kNoDeadline), Deadline::max());
  const Deadline now = std::chrono::steady_clock::now();
  const auto back = wire::DecodeDeadline(wire::EncodeDeadline(now));
  EXPECT_LT(std::chrono::abs(back - now), std::chrono::microseconds(1));
  EXPECT_EQ(wire::EncodeDeadline(Deadline{}), 0u);
}

TEST(GrantWireTest, StatusesTravelAsTheWireTableSaysAndUnknownCodesAreRefused) {
  std::string bytes;
  wire::PutStatus(&bytes, StaleError("old"));
  ASSERT_EQ(bytes.size(), 1u + 2 + 3);
  EXPECT_EQ(bytes[0], 5);  // common/wire_status.h: Stale is 5
  Status back;
  wire::Reader reader(bytes);
  ASSERT_TRUE(reader.GetStatus(&back));
  EXPECT_EQ(back, StaleError("old"));
  EXPECT_EQ(reader.remaining(), 0u);
  bytes[0] = 13;  // no code has this number
  wire::Reader unknown(bytes);
  EXPECT_FALSE(unknown.GetStatus(&back));
  EXPECT_EQ(unknown.remaining(), bytes.size());  // a refused status consumes nothing
  wire::Reader short_text(std::string_view(bytes).substr(0, 4));
  EXPECT_FALSE(short_text.GetStatus(&back));
}

TEST_F(GrantChannelTest, PinsHeldByOneConnectionAreBounded) {
  StartServer();
  auto conn = Connect();
  const std::vector<RangeRequest> full(wire::kMaxRanges, Range(0, 8));
  std::vector<Status> results;
  for (int i = 0; i < 4; ++i) {  // Acquire after Acquire without a Release
    ASSERT_TRUE(conn->Acquire(full, &results, kGrantTestTimeout).ok());
    ASSERT_TRUE(results.back().ok()) << i << ": " << results.back();
  }
  EXPECT_EQ(server_->held_pins(), static_cast<int>(4 * wire::kMaxRanges));
  ASSERT_TRUE(
      conn->Acquire(std::vector<RangeRequest>{Range(0, 8)}, &results, kGrantTestTimeout).ok());
  EXPECT_EQ(results[0].code(), StatusCode::kAgain) << results[0];
  EXPECT_EQ(server_->held_pins(), static_cast<int>(4 * wire::kMaxRanges));
  ASSERT_TRUE(conn->Release().ok());
  EXPECT_TRUE(ctx_.WaitNoPins(kGrantTestTimeout));
  ASSERT_TRUE(
      conn->Acquire(std::vector<RangeRequest>{Range(0, 8)}, &results, kGrantTestTimeout).ok());
  EXPECT_TRUE(results[0].ok()) << "room again after the Release";
}

TEST_F(GrantChannelTest, ConnectWaitsForRoomInAFullBacklogUntilItsDeadline) {
  // A listener with a backlog of one that never accepts: the second connect finds it full.
  const std::string path = dir_ + "/full.sock";
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 0), 0);
  std::vector<std::unique_ptr<GrantConnection>> held;
  Status last;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 4 && last.ok(); ++i) {
    Result<std::unique_ptr<GrantConnection>> c = GrantConnection::Connect(path, milliseconds(100));
    if (c.ok()) {
      held.push_back(std::move(c).value());
    } else {
      last = c.status();
    }
  }
  EXPECT_EQ(last.code(), StatusCode::kTimeout) << last;
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));
  // Accepting one makes room: a waiting connect gets through.
  std::thread accept_later([listener] { ::close(::accept(listener, nullptr, nullptr)); });
  Result<std::unique_ptr<GrantConnection>> waited =
      GrantConnection::Connect(path, kGrantTestTimeout);
  accept_later.join();
  EXPECT_TRUE(waited.ok()) << waited.status();
  ::close(listener);
  ::unlink(path.c_str());
}

TEST_F(GrantChannelTest, RangeCountsAreBounded) {
  GrantServer::Options options;
  options.max_ranges_per_acquire = 4;
  StartServer(options);
  auto conn = Connect();
  std::vector<Status> results;
  EXPECT_EQ(conn->Acquire({}, &results, kGrantTestTimeout).code(), StatusCode::kInvalidArgument);
  std::vector<RangeRequest> too_many(wire::kMaxRanges + 1, Range(0, 8));
  EXPECT_EQ(conn->Acquire(too_many, &results, kGrantTestTimeout).code(),
            StatusCode::kInvalidArgument);
  too_many.resize(5);
  Status over = conn->Acquire(too_many, &results, kGrantTestTimeout);
  EXPECT_EQ(over.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(over.message().find("limit of 4"), std::string::npos) << over;
  EXPECT_TRUE(results.empty());
  EXPECT_FALSE(conn->broken());
  EXPECT_EQ(ctx_.active_pins(), 0);
  too_many.resize(4);
  ASSERT_TRUE(conn->Acquire(too_many, &results, kGrantTestTimeout).ok());
  EXPECT_EQ(ctx_.active_pins(), 4);
  ASSERT_TRUE(conn->Release().ok());
  EXPECT_TRUE(ctx_.WaitNoPins(kGrantTestTimeout));
}

// Sends `bytes` on a raw connection and expects the server to close it and count a bad frame.
void ExpectClosedAsBadFrame(GrantChannelTest* t, int fd, const std::string& bytes,
                            GrantServer* server, uint64_t bad_before) {
  (void)t;
  ASSERT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
  char c;
  EXPECT_EQ(::recv(fd, &c, 1, 0), 0) << "the server should close the connection";
  EXPECT_EQ(server->bad_frames(), bad_before + 1);
  ::close(fd);
}

TEST_F(GrantChannelTest, BadFramesCloseTheConnectionAndDropItsPins) {
  StartServer();
  std::string frame;
  // A valid acquire first, so the bad frame has pins to drop.
  wire::PutHeader(&frame, wire::FrameType::kAcquire, 4 + wire::kRangeSize);
  wire::PutU32(&frame, 1);
  wire::PutU64(&frame, Addr(region_.data()));
  wire::PutU64(&frame, 64);
  wire::PutU64(&frame, kGrantTestIncarnation);
  wire::PutU64(&frame, 3);
  wire::PutU64(&frame, wire::kNoDeadline);
  int fd = RawConnect();
  ASSERT_EQ(::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(frame.size()));
  char reply[64];
  ASSERT_GT(::recv(fd, reply, sizeof(reply), 0), 0);
  EXPECT_EQ(ctx_.active_pins(), 1);
  std::string bad;
  wire::PutHeader(&bad, wire::FrameType::kAcquire, 0);
  bad[5] = 9;  // version
  ExpectClosedAsBadFrame(this, fd, bad, server_.get(), 0);
  EXPECT_TRUE(ctx_.WaitNoPins(kGrantTestTimeout));

  std::vector<std::string> bad_frames;
  std::string oversized;
  wire::PutHeader(&oversized, wire::FrameType::kAcquire, wire::kMaxFramePayload + 1);
  bad_frames.push_back(oversized);
  std::string unknown;
  wire::PutHeader(&unknown, wire::FrameType::kAcquire, 0);
  unknown[4] = 42;
  bad_frames.push_back(unknown);
  std::string miscounted;  // says two ranges, carries one
  wire::PutHeader(&miscounted, wire::FrameType::kAcquire, 4 + wire::kRangeSize);
  wire::PutU32(&miscounted, 2);
  miscounted.append(wire::kRangeSize, '\0');
  bad_frames.push_back(miscounted);
  std::string old_ranges;  // a version-1 sized range (no deadline) in a current frame
  wire::PutHeader(&old_ranges, wire::FrameType::kAcquire, 4 + 32);
  wire::PutU32(&old_ranges, 1);
  old_ranges.append(32, '\0');
  bad_frames.push_back(old_ranges);
  for (const uint8_t version : {uint8_t{1}, uint8_t{2}}) {  // older peers (2: no pin table)
    std::string old;
    wire::PutHeader(&old, wire::FrameType::kRelease, 0);
    old[5] = static_cast<char>(version);
    bad_frames.push_back(old);
  }
  std::string version2_acquire;  // what a version-2 initiator sends first: a valid v2 Acquire
  wire::PutHeader(&version2_acquire, wire::FrameType::kAcquire, 4 + wire::kRangeSize);
  wire::PutU32(&version2_acquire, 1);
  wire::PutU64(&version2_acquire, Addr(region_.data()));
  wire::PutU64(&version2_acquire, 8);
  wire::PutU64(&version2_acquire, kGrantTestIncarnation);
  wire::PutU64(&version2_acquire, 3);
  wire::PutU64(&version2_acquire, wire::kNoDeadline);
  version2_acquire[5] = 2;
  bad_frames.push_back(version2_acquire);
  for (const auto type : {wire::FrameType::kAcquireReply, wire::FrameType::kMapTableReply,
                          wire::FrameType::kMapSlotReply}) {
    std::string reply_to_server;
    wire::PutHeader(&reply_to_server, type, 0);
    bad_frames.push_back(reply_to_server);
  }
  for (const auto type : {wire::FrameType::kMapTable, wire::FrameType::kMapSlot}) {
    std::string with_payload;
    wire::PutHeader(&with_payload, type, 4);
    wire::PutU32(&with_payload, 0);
    bad_frames.push_back(with_payload);
  }
  std::string release_with_payload;
  wire::PutHeader(&release_with_payload, wire::FrameType::kRelease, 1);
  release_with_payload.push_back('x');
  bad_frames.push_back(release_with_payload);
  uint64_t before = server_->bad_frames();
  for (const std::string& b : bad_frames) {
    ExpectClosedAsBadFrame(this, RawConnect(), b, server_.get(), before);
    before = server_->bad_frames();
  }
  // The server still serves well-formed clients.
  auto conn = Connect();
  std::vector<Status> results;
  ASSERT_TRUE(
      conn->Acquire(std::vector<RangeRequest>{Range(0, 8)}, &results, kGrantTestTimeout).ok());
  EXPECT_TRUE(results[0].ok());
}

TEST_F(GrantChannelTest, FetchFdHandsOverTheBufferFile) {
  const int memfd = ::memfd_create("grant-test", MFD_CLOEXEC);
  ASSERT_GE(memfd, 0);
  ASSERT_EQ(::ftruncate(memfd, 4096), 0);
  GrantServer::Options options;
  options.fds = [memfd](uint64_t id) -> Result<int> {
    if (id == 5) return memfd;
    return NotFoundError("no buffer " + std::to_string(id));
  };
  StartServer(options);
  auto conn = Connect();
  Result<int> fd = conn->FetchFd(5, kGrantTestTimeout);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_NE(*fd, memfd);
  struct stat a {
  }, b{};
  ASSERT_EQ(::fstat(memfd, &a), 0);
  ASSERT_EQ(::fstat(*fd, &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(b.st_size, 4096);
  void* map = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
  ASSERT_NE(map, MAP_FAILED);
  std::memcpy(map, "hello", 5);
  char back[5];
  ASSERT_EQ(::pread(memfd, back, 5, 0), 5);
  EXPECT_EQ(std::string(back, 5), "hello");
  ::munmap(map, 4096);
  ::close(*fd);

  Result<int> missing = conn->FetchFd(6, kGrantTestTimeout);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "no buffer 6");
  EXPECT_FALSE(conn->broken());
  // Acquire still works on the same connection afterwards.
  std::vector<Status> results;
  ASSERT_TRUE(
      conn->Acquire(std::vector<RangeRequest>{Range(0, 8)}, &results, kGrantTestTimeout).ok());
  EXPECT_TRUE(results[0].ok());
  conn.reset();
  server_.reset();
  ::close(memfd);
}

TEST_F(GrantChannelTest, FetchFdWithoutALookupIsNotFound) {
  StartServer();
  auto conn = Connect();
  EXPECT_EQ(conn->FetchFd(1, kGrantTestTimeout).status().code(), StatusCode::kNotFound);
}

TEST_F(GrantChannelTest, ASilentServerTimesOutWithinTheBoundAndBreaksTheConnection) {
  // A listener that accepts (through the backlog) and never answers.
  const std::string path = dir_ + "/silent.sock";
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  Result<std::unique_ptr<GrantConnection>> conn = GrantConnection::Connect(path, kGrantTestTimeout);
  ASSERT_TRUE(conn.ok()) << conn.status();
  std::vector<Status> results;
  const auto start = std::chrono::steady_clock::now();
  Status s = (*conn)->Acquire(std::vector<RangeRequest>{Range(0, 8)}, &results, milliseconds(100));
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s;
  EXPECT_GE(took, milliseconds(90));
  EXPECT_LT(took, milliseconds(1000));
  EXPECT_TRUE((*conn)->broken());
  EXPECT_EQ((*conn)->Release().code(), StatusCode::kUnavailable);
  EXPECT_EQ((*conn)->FetchFd(1, kGrantTestTimeout).status().code(), StatusCode::kUnavailable);
  ::close(listener);
  ::unlink(path.c_str());
}

TEST_F(GrantChannelTest, ConnectToNothingIsUnavailable) {
  Result<std::unique_ptr<GrantConnection>> conn =
      GrantConnection::Connect(dir_ + "/nobody.sock", kGrantTestTimeout);
  EXPECT_EQ(conn.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(GrantConnection::Connect("", kGrantTestTimeout).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(GrantChannelTest, StopRefusesNewGrantsAndWaitsForHeldPinsToBeReleased) {
  StartServer();  // drain_timeout: 5 s
  auto holder = Connect();
  auto other = Connect();
  std::vector<Status> results;
  ASSERT_TRUE(
      holder->Acquire(std::vector<RangeRequest>{Range(0, 8)}, &results, kGrantTestTimeout).ok());
  std::unique_ptr<GrantServer> server = std::move(server_);
  std::thread stopper([&server] { server.reset(); });
  // Once the server is draining, a new Acquire is refused as a whole; the connection stays.
  Status refused;
  ASSERT_TRUE(WaitFor(
      [&] {
        refused =
            other->Acquire(std::vector<RangeRequest>{Range(8, 8)}, &results, kGrantTestTimeout);
        if (refused.ok()) (void)other->Release();
        return refused.code() == StatusCode::kUnavailable;
      },
      kGrantTestTimeout));
  EXPECT_NE(refused.message().find("is stopping"), std::string::npos) << refused;
  EXPECT_FALSE(other->broken());
  EXPECT_FALSE(ctx_.WaitNoPins(milliseconds(50))) << "the holder may be copying: its pin must stay";
  EXPECT_EQ(ctx_.active_pins(), 1);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(holder->Release().ok());
  stopper.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));
  EXPECT_EQ(ctx_.active_pins(), 0);
}

TEST_F(GrantChannelTest, StoppingIsBoundedAndDropsEveryPin) {
  GrantServer::Options options;
  options.drain_timeout = milliseconds(100);
  StartServer(options);
  std::vector<std::unique_ptr<GrantConnection>> conns;
  for (int i = 0; i < 4; ++i) {
    conns.push_back(Connect());
    std::vector<Status> results;
    ASSERT_TRUE(conns.back()
                    ->Acquire(std::vector<RangeRequest>{Range(static_cast<size_t>(i) * 8, 8)},
                              &results, kGrantTestTimeout)
                    .ok());
  }
  EXPECT_EQ(ctx_.active_pins(), 4);
  const auto start = std::chrono::steady_clock::now();
  server_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(1000));
  EXPECT_EQ(ctx_.active_pins(), 0);
  std::vector<Status> results;
  EXPECT_EQ(
      conns[0]->Acquire(std::vector<RangeRequest>{Range(0, 8)}, &results, kGrantTestTimeout).code(),
      StatusCode::kUnavailable);
  EXPECT_TRUE(conns[0]->broken());
}

TEST_F(GrantChannelTest, ManyConnectionsAcquireAndReleaseConcurrently) {
  StartServer();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto conn = GrantConnection::Connect(server_->path(), kGrantTestTimeout);
      if (!conn.ok()) {
        ++failures;
        return;
      }
      for (int i = 0; i < 200; ++i) {
        std::vector<RangeRequest> ranges;
        for (int r = 0; r < 8; ++r) ranges.push_back(Range(static_cast<size_t>(t * 512 + r), 8));
        std::vector<Status> results;
        if (!(*conn)->Acquire(ranges, &results, kGrantTestTimeout).ok() || results.size() != 8 ||
            !results[7].ok() || !(*conn)->Release().ok()) {
          ++failures;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(ctx_.WaitNoPins(kGrantTestTimeout));
  EXPECT_EQ(ctx_.pin_calls(), 4u * 200 * 8);
}

// Not a gate: prints what a grant costs on the data path (one Acquire round trip and a one-way
// Release per batch), and checks that every pin came back.
TEST_F(GrantChannelTest, AcquireReleaseCost) {
  StartServer();
  auto conn = Connect();
  for (size_t ranges : {size_t{1}, size_t{64}, size_t{1024}}) {
    std::vector<RangeRequest> batch(ranges, Range(0, 8));
    std::vector<Status> results;
    constexpr int kRounds = 1000;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRounds; ++i) {
      ASSERT_TRUE(conn->Acquire(batch, &results, kGrantTestTimeout).ok());
      ASSERT_TRUE(results.back().ok());
      ASSERT_TRUE(conn->Release().ok());
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        kRounds;
    std::cout << "[ info ] grant Acquire+Release of " << ranges << " ranges: " << us << " us"
              << std::endl;
  }
  EXPECT_TRUE(ctx_.WaitNoPins(kGrantTestTimeout));
}

}  // namespace
}  // namespace ferry::samehost
