#include "common/peer_auth.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"

namespace ferry::auth {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;

constexpr std::string_view kSecret = "a cluster secret of 32 bytes ..";
constexpr std::string_view kOther = "another secret, also long enough";

Handshake NewClient(std::string_view secret = kSecret, Channel channel = Channel::kRpc) {
  Result<Handshake> h = Handshake::Client(channel, secret, "server");
  EXPECT_TRUE(h.ok()) << h.status();
  return std::move(h).value();
}

Handshake NewServer(std::string_view secret = kSecret, Channel channel = Channel::kRpc) {
  Result<Handshake> h = Handshake::Server(channel, secret, "client");
  EXPECT_TRUE(h.ok()) << h.status();
  return std::move(h).value();
}

// Everything `from` has to send.
Bytes Drain(Handshake& from) {
  Bytes out(from.output().begin(), from.output().end());
  from.Sent(out.size());
  return out;
}

// Feeds `bytes` to `to` as far as it wants them; returns how many it took.
size_t Feed(Handshake& to, const Bytes& bytes) {
  size_t at = 0;
  while (at < bytes.size() && to.want() > 0) {
    const size_t n = std::min(to.want(), bytes.size() - at);
    to.Received(std::span<const uint8_t>(bytes.data() + at, n));
    at += n;
  }
  return at;
}

// Moves bytes between the two ends until neither has anything to say.
void Pump(Handshake& client, Handshake& server) {
  for (int round = 0; round < 10; ++round) {
    const Bytes c = Drain(client);
    Feed(server, c);
    const Bytes s = Drain(server);
    Feed(client, s);
    if (c.empty() && s.empty()) return;
  }
}

TEST(PeerAuthTest, TheSameSecretAuthenticatesBothEnds) {
  Handshake client = NewClient();
  Handshake server = NewServer();
  Pump(client, server);
  EXPECT_TRUE(client.done()) << client.error();
  EXPECT_TRUE(server.done()) << server.error();
  EXPECT_TRUE(client.authenticated());
  EXPECT_TRUE(server.authenticated());
  EXPECT_TRUE(server.passthrough().empty());
  EXPECT_EQ(client.want(), 0u);  // reads nothing of the protocol that follows
  EXPECT_EQ(server.want(), 0u);
}

TEST(PeerAuthTest, OneByteAtATimeWorksToo) {
  Handshake client = NewClient();
  Handshake server = NewServer();
  for (int i = 0; i < 1000 && !(client.done() && server.done()); ++i) {
    for (auto [from, to] : {std::pair{&client, &server}, std::pair{&server, &client}}) {
      if (!from->output().empty() && to->want() > 0) {
        to->Received(from->output().first(1));
        from->Sent(1);
      }
    }
  }
  EXPECT_TRUE(client.authenticated());
  EXPECT_TRUE(server.authenticated());
}

TEST(PeerAuthTest, AnotherSecretIsDeniedOnBothEnds) {
  Handshake client = NewClient(kOther);
  Handshake server = NewServer(kSecret);
  Pump(client, server);
  ASSERT_TRUE(client.denied());
  EXPECT_EQ(client.error().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(client.error().message().find("peer server failed authentication"),
            std::string::npos)
      << client.error();
  ASSERT_TRUE(server.denied());
  EXPECT_EQ(server.error().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(server.error().message().find("peer client refused"), std::string::npos)
      << server.error();
  EXPECT_FALSE(client.authenticated());
  EXPECT_FALSE(server.authenticated());
}

TEST(PeerAuthTest, AClientWithASecretAndAServerWithoutOneRefuseEachOther) {
  Handshake client = NewClient();
  Handshake server = NewServer("");
  Pump(client, server);
  ASSERT_TRUE(server.denied());
  EXPECT_NE(server.error().message().find("this peer has no auth secret"), std::string::npos)
      << server.error();
  ASSERT_TRUE(client.denied());
  EXPECT_EQ(client.error().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(client.error().message().find("it has no auth secret"), std::string::npos)
      << client.error();
}

TEST(PeerAuthTest, AServerWithASecretRefusesAPeerThatSpeaksItsProtocolAtOnce) {
  Handshake server = NewServer();
  const Bytes frame = {'F', 'R', 'Y', '1', 1, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(Feed(server, frame), 4u);  // it reads no further than the magic
  ASSERT_TRUE(server.denied());
  EXPECT_EQ(server.error().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(server.error().message().find("this peer requires authentication"),
            std::string::npos)
      << server.error();
  // The client without a secret finds the refusal where its first reply should be.
  const Bytes refusal = Drain(server);
  ASSERT_EQ(refusal.size(), kMessageSize);
  const Status seen = RefusalIn(refusal, "target");
  EXPECT_EQ(seen.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(seen.message().find("peer target refused the connection: it requires authentication"),
            std::string::npos)
      << seen;
  // An ordinary reply is not a refusal.
  EXPECT_TRUE(RefusalIn(frame, "target").ok());
}

TEST(PeerAuthTest, AServerWithoutASecretHandsBackTheProtocolBytes) {
  Handshake server = NewServer("");
  const Bytes frame = {'F', 'R', 'Y', '1', 1, 0};
  EXPECT_EQ(Feed(server, frame), 4u);
  ASSERT_TRUE(server.done());
  EXPECT_FALSE(server.authenticated());
  EXPECT_TRUE(server.output().empty());
  EXPECT_EQ(Bytes(server.passthrough().begin(), server.passthrough().end()),
            Bytes(frame.begin(), frame.begin() + 4));
}

TEST(PeerAuthTest, AnotherChannelIsRefused) {
  Handshake client = NewClient(kSecret, Channel::kRpc);
  Handshake server = NewServer(kSecret, Channel::kTcp);
  Pump(client, server);
  ASSERT_TRUE(server.denied());
  EXPECT_NE(server.error().message().find("another channel"), std::string::npos)
      << server.error();
  EXPECT_TRUE(client.denied());
}

TEST(PeerAuthTest, GarbageAfterTheMagicIsDenied) {
  for (size_t byte : {4u, 5u, 7u, 50u}) {  // version, type, mode, the mac of a hello
    Handshake client = NewClient();
    Bytes hello = Drain(client);
    hello[byte] ^= 0x5a;
    Handshake server = NewServer();
    Feed(server, hello);
    ASSERT_TRUE(server.denied()) << "byte " << byte;
    EXPECT_EQ(server.error().code(), StatusCode::kPermissionDenied);
    EXPECT_EQ(server.output().size(), kMessageSize);  // a refusal to send
  }
  // A challenge whose MAC was tampered with: the client proves nothing and refuses.
  Handshake client = NewClient();
  Handshake server = NewServer();
  Feed(server, Drain(client));
  Bytes challenge = Drain(server);
  challenge[kMessageSize - 1] ^= 1;
  Feed(client, challenge);
  ASSERT_TRUE(client.denied());
  const Bytes answer = Drain(client);
  ASSERT_EQ(answer.size(), kMessageSize);
  EXPECT_FALSE(RefusalIn(answer, "x").ok());  // a refusal, not a proof
}

TEST(PeerAuthTest, AReflectedServerMacIsNotAProof) {
  // An attacker without the secret sends a hello and answers the challenge with the server's
  // own MAC (reflection), or with the challenge message itself.
  for (int variant = 0; variant < 2; ++variant) {
    Handshake attacker = NewClient(kOther);
    Handshake server = NewServer();
    Feed(server, Drain(attacker));
    const Bytes challenge = Drain(server);
    Bytes reply = challenge;
    if (variant == 0) {
      reply[5] = 3;                                       // proof type
      reply[7] = 0;                                       // proof detail
      std::fill(reply.begin() + 8, reply.begin() + 40, 0);  // proof carries no nonce
    }
    Feed(server, reply);
    ASSERT_TRUE(server.denied()) << "variant " << variant;
    EXPECT_EQ(server.error().code(), StatusCode::kPermissionDenied);
    EXPECT_FALSE(server.authenticated());
  }
}

TEST(PeerAuthTest, AReplayedProofFailsAgainstAFreshChallenge) {
  // A recorded good session...
  Handshake client = NewClient();
  Handshake server = NewServer();
  const Bytes hello = Drain(client);
  Feed(server, hello);
  Feed(client, Drain(server));
  const Bytes proof = Drain(client);
  Feed(server, proof);
  ASSERT_TRUE(server.authenticated());
  // ...replayed to a new server, whose nonce differs.
  Handshake again = NewServer();
  Feed(again, hello);
  (void)Drain(again);
  Feed(again, proof);
  ASSERT_TRUE(again.denied());
  EXPECT_NE(again.error().message().find("failed authentication"), std::string::npos);
}

TEST(PeerAuthTest, SecretsAreValidated) {
  EXPECT_TRUE(ValidateSecret("").ok());
  EXPECT_EQ(ValidateSecret("short").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateSecret(kSecret).ok());
  EXPECT_EQ(Handshake::Client(Channel::kRpc, "", "p").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Handshake::Server(Channel::kRpc, "short", "p").status().code(),
            StatusCode::kInvalidArgument);
}

// ---- over a real socket pair -----------------------------------------------------------------

struct SocketPair {
  UniqueFd a, b;
  static SocketPair Make() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    return {UniqueFd(fds[0]), UniqueFd(fds[1])};
  }
};

TEST(PeerAuthTest, RunHandshakeOverASocketThenTheProtocolFollows) {
  SocketPair pair = SocketPair::Make();
  Status server_result;
  std::thread server_thread([&] {
    Handshake server = NewServer();
    server_result = RunHandshake(server, pair.b.get(), std::chrono::steady_clock::now() + 5s);
  });
  Handshake client = NewClient();
  const Status client_result =
      RunHandshake(client, pair.a.get(), std::chrono::steady_clock::now() + 5s);
  server_thread.join();
  EXPECT_TRUE(client_result.ok()) << client_result;
  EXPECT_TRUE(server_result.ok()) << server_result;
  // Nothing of the handshake is left in either direction.
  ASSERT_EQ(::send(pair.a.get(), "next", 4, 0), 4);
  char got[8] = {};
  EXPECT_EQ(::recv(pair.b.get(), got, sizeof(got), 0), 4);
  EXPECT_EQ(std::string(got, 4), "next");
}

TEST(PeerAuthTest, RunHandshakeWithAnotherSecretIsPermissionDeniedOnBothEnds) {
  SocketPair pair = SocketPair::Make();
  Status server_result;
  std::thread server_thread([&] {
    Handshake server = NewServer(kSecret);
    server_result = RunHandshake(server, pair.b.get(), std::chrono::steady_clock::now() + 5s);
  });
  Handshake client = NewClient(kOther);
  const Status client_result =
      RunHandshake(client, pair.a.get(), std::chrono::steady_clock::now() + 5s);
  server_thread.join();
  EXPECT_EQ(client_result.code(), StatusCode::kPermissionDenied) << client_result;
  EXPECT_EQ(server_result.code(), StatusCode::kPermissionDenied) << server_result;
}

TEST(PeerAuthTest, ATruncatedHelloEndsWithTheConnectionNotAHang) {
  SocketPair pair = SocketPair::Make();
  Handshake client = NewClient();
  const Bytes hello = Drain(client);
  ASSERT_EQ(::send(pair.a.get(), hello.data(), 30, 0), 30);
  pair.a.Reset();  // the peer goes away mid-message
  Handshake server = NewServer();
  const Status s = RunHandshake(server, pair.b.get(), std::chrono::steady_clock::now() + 5s);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_FALSE(server.done());
}

TEST(PeerAuthTest, AStalledPeerTimesOutAtTheDeadline) {
  SocketPair pair = SocketPair::Make();
  Handshake client = NewClient();
  const Bytes hello = Drain(client);
  ASSERT_EQ(::send(pair.a.get(), hello.data(), 10, 0), 10);  // then nothing
  Handshake server = NewServer();
  const Status s =
      RunHandshake(server, pair.b.get(), std::chrono::steady_clock::now() + 100ms);
  EXPECT_EQ(s.code(), StatusCode::kTimeout) << s;
}

TEST(PeerAuthTest, RefusalsAreLoggedOncePerPeerAddress) {
  RefusalLog log;
  ::testing::internal::CaptureStderr();
  for (int port = 1000; port < 1010; ++port) {
    log.Refused("test server", "10.1.2.3:" + std::to_string(port), PermissionDeniedError("no"));
  }
  log.Refused("test server", "[::1]:7", PermissionDeniedError("no"));
  log.Refused("test server", "[::1]:8", PermissionDeniedError("no"));
  const std::string text = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(log.count(), 12u);
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_EQ(lines, 2u) << text;
  // Past kMaxAddresses addresses one more line says so, then nothing.
  ::testing::internal::CaptureStderr();
  for (size_t i = 0; i < RefusalLog::kMaxAddresses + 50; ++i) {
    log.Refused("test server", "host-" + std::to_string(i), PermissionDeniedError("no"));
  }
  const std::string many = ::testing::internal::GetCapturedStderr();
  lines = 0;
  for (char c : many) lines += c == '\n';
  EXPECT_EQ(lines, RefusalLog::kMaxAddresses - 2 + 1);
}

}  // namespace
}  // namespace ferry::auth
