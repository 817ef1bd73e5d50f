// ferry-metadata-server over real HTTP: the Mooncake API, ferry's additions (TTL, prefix
// listing, health, limits), persistence across restarts and crashes, signals and start errors.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/tsan_suppressions.h"
#include "common/unique_fd.h"
#include "test_servers.h"

FERRY_TSAN_IGNORE_HTTPLIB()

namespace ferry::testing {
namespace {

using namespace std::chrono_literals;

std::string ServerBinary() { return BinDir() + "/ferry-metadata-server"; }

std::unique_ptr<MetadataServer> MustStart(std::vector<std::string> extra_args = {}) {
  Result<std::unique_ptr<MetadataServer>> server = MetadataServer::Start(std::move(extra_args));
  if (!server.ok()) {
    ADD_FAILURE() << server.status();
    return nullptr;
  }
  return std::move(*server);
}

std::unique_ptr<httplib::Client> Connect(uint16_t port) {
  auto client = std::make_unique<httplib::Client>("127.0.0.1", port);
  client->set_connection_timeout(2s);
  client->set_read_timeout(5s);
  client->set_write_timeout(5s);
  return client;
}

int StatusOf(const httplib::Result& result) { return result ? result->status : -1; }

int PutKey(httplib::Client& c, const std::string& query, const std::string& body) {
  return StatusOf(c.Put("/metadata?" + query, body, "application/json"));
}

int GetStatus(httplib::Client& c, const std::string& key) {
  return StatusOf(c.Get("/metadata?key=" + key));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A TCP connection to 127.0.0.1:`port` whose sends and receives give up after 5 s; -1 when the
// connect fails.
int ConnectLoopback(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  timeval tv{.tv_sec = 5, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends raw bytes on a new connection and returns everything the server answers until it
// closes (or 5 s pass). The request should say "Connection: close". The sending side stays open:
// cpp-httplib does not answer a peer that has half-closed.
std::string RawExchange(uint16_t port, const std::string& request) {
  const int fd = ConnectLoopback(port);
  std::string answer;
  if (fd >= 0 && ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
                     static_cast<ssize_t>(request.size())) {
    char buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) answer.append(buf, static_cast<size_t>(n));
  }
  if (fd >= 0) ::close(fd);
  return answer;
}

// Reads one HTTP response with a Content-Length body from `fd` (appending past reads to
// `*pending`, which keeps what follows it); returns it, or what arrived before the connection
// closed or 5 s passed without a byte.
std::string ReadOneResponse(int fd, std::string* pending) {
  char buf[4096];
  while (true) {
    const size_t head_end = pending->find("\r\n\r\n");
    if (head_end != std::string::npos) {
      static const std::regex kLength("\r\nContent-Length: *([0-9]+)", std::regex::icase);
      std::smatch match;
      const std::string head = pending->substr(0, head_end + 4);
      const size_t length =
          std::regex_search(head, match, kLength) ? std::stoul(match[1].str()) : 0;
      if (pending->size() >= head.size() + length) {
        std::string response = pending->substr(0, head.size() + length);
        pending->erase(0, response.size());
        return response;
      }
    }
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return std::exchange(*pending, {});
    pending->append(buf, static_cast<size_t>(n));
  }
}

// PUTs `total` bytes of 'x' under `key` with Transfer-Encoding: chunked (64 KiB chunks) on a
// new connection, and returns the server's answer. The body goes from its own thread, which
// stops at the first failed send (the server may refuse the body and close) or after 5 s of a
// full send buffer, so an answer that comes before the body ended is read.
std::string ChunkedPut(uint16_t port, const std::string& key, size_t total) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) {
    return "connect failed";
  }
  auto send_all = [fd](const std::string& bytes) {
    return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  };
  std::thread sender([&] {
    if (!send_all("PUT /metadata?key=" + key +
                  " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n")) {
      return;
    }
    for (size_t sent = 0; sent < total;) {
      const size_t n = std::min<size_t>(64 << 10, total - sent);
      char size_line[32];
      std::snprintf(size_line, sizeof(size_line), "%zx\r\n", n);
      if (!send_all(size_line + std::string(n, 'x') + "\r\n")) return;
      sent += n;
    }
    send_all("0\r\n\r\n");
  });
  std::string answer;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) answer.append(buf, static_cast<size_t>(n));
  ::shutdown(fd, SHUT_RDWR);  // ends a sender still blocked on a full buffer
  sender.join();
  ::close(fd);
  return answer;
}

// Runs the server binary with `args` to completion (it must exit by itself within 10 s) and
// returns its exit code, with its output in *output.
int RunToExit(const TempDir& dir, const std::string& args, std::string* output) {
  const std::string log = dir.path() + "/run.log";
  const std::string command = "timeout 10 " + ServerBinary() + " " + args + " >" + log + " 2>&1";
  const int status = std::system(command.c_str());
  *output = ReadFile(log);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(MetadataServerTest, GetPutDeleteSpeakMooncakesApi) {
  auto server = MustStart();
  ASSERT_NE(server, nullptr);
  auto c = Connect(server->port());
  EXPECT_EQ(PutKey(*c, "key=mooncake/ram/seg", R"({"buffers":[]})"), 200);
  httplib::Result got = c->Get("/metadata?key=mooncake/ram/seg");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->body, R"({"buffers":[]})");
  EXPECT_EQ(got->get_header_value("Content-Type"), "application/json");

  EXPECT_EQ(GetStatus(*c, "absent"), 404);
  EXPECT_EQ(StatusOf(c->Delete("/metadata?key=mooncake/ram/seg")), 200);
  EXPECT_EQ(StatusOf(c->Delete("/metadata?key=mooncake/ram/seg")), 200);  // absent: still 200
  EXPECT_EQ(GetStatus(*c, "mooncake/ram/seg"), 404);

  // Keys are URL-decoded; an overwrite replaces the value.
  EXPECT_EQ(PutKey(*c, "key=a%20b%2Fc%26d", "v1"), 200);
  EXPECT_EQ(PutKey(*c, "key=a%20b%2Fc%26d", "v2"), 200);
  got = c->Get("/metadata?key=a%20b%2Fc%26d");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->body, "v2");
  // An empty value is a value.
  EXPECT_EQ(PutKey(*c, "key=empty", ""), 200);
  EXPECT_EQ(GetStatus(*c, "empty"), 200);

  // Sequential requests on one kept-alive connection are each answered on it (a PUT, then a GET
  // of what it stored). This checks behaviour only: the connection stays open and answers every
  // request. Their speed (they once waited ~40 ms each on the client's delayed ACK, with Nagle
  // holding back the body the server wrote after the header) is measured in
  // bench/metadata_bench.cc (BM_HttpKeptAlive), never asserted here.
  const UniqueFd conn(ConnectLoopback(server->port()));  // closed however the test ends
  ASSERT_TRUE(conn.valid());
  const int fd = conn.get();
  auto send_all = [fd](const std::string& bytes) {
    return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
           static_cast<ssize_t>(bytes.size());
  };
  std::string pending;
  ASSERT_TRUE(
      send_all("PUT /metadata?key=kept HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nalive"));
  const std::string put = ReadOneResponse(fd, &pending);
  EXPECT_EQ(put.substr(0, 12), "HTTP/1.1 200") << put;
  EXPECT_EQ(put.find("Connection: close"), std::string::npos) << put;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(send_all("GET /metadata?key=kept HTTP/1.1\r\nHost: x\r\n\r\n"));
    const std::string get = ReadOneResponse(fd, &pending);
    EXPECT_EQ(get.substr(0, 12), "HTTP/1.1 200") << i << ": " << get;
    EXPECT_TRUE(get.ends_with("\r\n\r\nalive")) << i << ": " << get;
  }
}

TEST(MetadataServerTest, MalformedRequestsAre400) {
  auto server = MustStart();
  ASSERT_NE(server, nullptr);
  auto c = Connect(server->port());
  EXPECT_EQ(PutKey(*c, "nokey=1", "v"), 400);
  EXPECT_EQ(PutKey(*c, "key=", "v"), 400);
  EXPECT_EQ(StatusOf(c->Get("/metadata")), 400);
  EXPECT_EQ(StatusOf(c->Delete("/metadata")), 400);
  for (const char* ttl : {"0", "86401", "-1", "abc", "1.5", ""}) {
    EXPECT_EQ(PutKey(*c, std::string("key=k&ttl=") + ttl, "v"), 400) << "ttl=" << ttl;
  }
  EXPECT_EQ(PutKey(*c, "key=%FF%FE", "v"), 400);  // not UTF-8
  EXPECT_EQ(GetStatus(*c, "k"), 404);             // nothing was stored by the refusals

  // A body that cannot be read (broken chunked encoding) is 400.
  const std::string answer =
      RawExchange(server->port(),
                  "PUT /metadata?key=k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                  "Transfer-Encoding: chunked\r\n\r\nzz\r\n");
  EXPECT_EQ(answer.substr(0, 12), "HTTP/1.1 400") << answer;
  EXPECT_EQ(GetStatus(*c, "k"), 404);
}

TEST(MetadataServerTest, BodyAndKeyLimits) {
  auto server = MustStart({"--max-body", "1024", "--max-keys", "2"});
  ASSERT_NE(server, nullptr);
  auto c = Connect(server->port());
  EXPECT_EQ(PutKey(*c, "key=big", std::string(1025, 'x')), 413);
  EXPECT_EQ(PutKey(*c, "key=a", std::string(1024, 'x')), 200);
  EXPECT_EQ(PutKey(*c, "key=b", "2"), 200);
  EXPECT_EQ(PutKey(*c, "key=c", "3"), 507);  // full
  EXPECT_EQ(PutKey(*c, "key=a", "1"), 200);  // overwriting needs no room
  EXPECT_EQ(StatusOf(c->Delete("/metadata?key=b")), 200);
  EXPECT_EQ(PutKey(*c, "key=c", "3"), 200);
  EXPECT_EQ(GetStatus(*c, "big"), 404);
}

// --max-body holds however the body is framed: a chunked body over it (here 8 MiB against
// 1 KiB) is answered 413 without being stored; chunked bodies within it are stored as sent.
TEST(MetadataServerTest, ChunkedBodiesAreBoundedByMaxBody) {
  auto server = MustStart({"--max-body", "1024"});
  ASSERT_NE(server, nullptr);
  const std::string refused = ChunkedPut(server->port(), "big", size_t{8} << 20);
  EXPECT_EQ(refused.substr(0, 12), "HTTP/1.1 413") << refused.substr(0, 200);
  EXPECT_NE(refused.find("1024"), std::string::npos) << refused.substr(0, 400);
  auto c = Connect(server->port());
  EXPECT_EQ(GetStatus(*c, "big"), 404);

  const std::string over_by_one = ChunkedPut(server->port(), "big", 1025);
  EXPECT_EQ(over_by_one.substr(0, 12), "HTTP/1.1 413") << over_by_one.substr(0, 200);
  EXPECT_EQ(GetStatus(*c, "big"), 404);

  for (const size_t size : {size_t{0}, size_t{1}, size_t{1024}}) {
    const std::string key = "fits" + std::to_string(size);
    const std::string answer = ChunkedPut(server->port(), key, size);
    EXPECT_EQ(answer.substr(0, 12), "HTTP/1.1 200") << size << ": " << answer.substr(0, 200);
    httplib::Result got = c->Get("/metadata?key=" + key);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->status, 200);
    EXPECT_EQ(got->body, std::string(size, 'x'));
  }
  // The refused requests cost the server nothing: it still takes a body at the limit.
  EXPECT_EQ(PutKey(*c, "key=after", std::string(1024, 'y')), 200);
}

TEST(MetadataServerTest, PrefixListingIsSortedWithBase64Values) {
  auto server = MustStart();
  ASSERT_NE(server, nullptr);
  auto c = Connect(server->port());
  EXPECT_EQ(PutKey(*c, "key=p/b", std::string("\x00\xff", 2)), 200);
  EXPECT_EQ(PutKey(*c, "key=p/a", "1"), 200);
  EXPECT_EQ(PutKey(*c, "key=q/a", "2"), 200);
  EXPECT_EQ(PutKey(*c, "key=p", "3"), 200);

  httplib::Result listed = c->Get("/metadata?prefix=p%2F");
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->status, 200);
  EXPECT_EQ(nlohmann::json::parse(listed->body),
            nlohmann::json::parse(R"({"keys":[{"key":"p/a","value_b64":"MQ=="},
                                              {"key":"p/b","value_b64":"AP8="}]})"));
  listed = c->Get("/metadata?prefix=");
  ASSERT_TRUE(listed);
  const nlohmann::json all = nlohmann::json::parse(listed->body);
  ASSERT_EQ(all["keys"].size(), 4u);
  EXPECT_EQ(all["keys"][0]["key"], "p");
  EXPECT_EQ(all["keys"][3]["key"], "q/a");
  listed = c->Get("/metadata?prefix=zzz");
  ASSERT_TRUE(listed);
  EXPECT_EQ(nlohmann::json::parse(listed->body), nlohmann::json::parse(R"({"keys":[]})"));
}

TEST(MetadataServerTest, HealthCountsKeys) {
  auto server = MustStart();
  ASSERT_NE(server, nullptr);
  auto c = Connect(server->port());
  EXPECT_EQ(PutKey(*c, "key=a", "1"), 200);
  EXPECT_EQ(PutKey(*c, "key=b", "2"), 200);
  httplib::Result health = c->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(nlohmann::json::parse(health->body),
            nlohmann::json::parse(R"({"status":"ok","keys":2})"));
}

TEST(MetadataServerTest, KeysExpireTtlAfterTheirLastPut) {
  auto server = MustStart();
  ASSERT_NE(server, nullptr);
  auto c = Connect(server->port());
  EXPECT_EQ(PutKey(*c, "key=short&ttl=1", "s"), 200);
  EXPECT_EQ(PutKey(*c, "key=renewed&ttl=2", "r"), 200);
  EXPECT_EQ(PutKey(*c, "key=untimed&ttl=1", "u"), 200);
  EXPECT_EQ(PutKey(*c, "key=untimed", "u"), 200);  // a PUT without ttl removes the TTL
  // Put last, with the longest first TTL: once it expired, so would have every key above had
  // its TTL not been renewed or removed. The server's own expiry is the event waited for.
  EXPECT_EQ(PutKey(*c, "key=reference&ttl=2", "x"), 200);
  EXPECT_EQ(GetStatus(*c, "short"), 200);

  EXPECT_TRUE(WaitFor([&] { return GetStatus(*c, "short") == 404; }, 3s));
  EXPECT_EQ(PutKey(*c, "key=renewed&ttl=2", "r"), 200);  // now expires 2 s after short did
  httplib::Result listed = c->Get("/metadata?prefix=");
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->body.find("short"), std::string::npos) << listed->body;

  EXPECT_TRUE(WaitFor([&] { return GetStatus(*c, "reference") == 404; }, 3s));
  EXPECT_EQ(GetStatus(*c, "renewed"), 200);
  EXPECT_EQ(GetStatus(*c, "untimed"), 200);
  EXPECT_TRUE(WaitFor([&] { return GetStatus(*c, "renewed") == 404; }, 4s));
  httplib::Result health = c->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(nlohmann::json::parse(health->body)["keys"], 1);
}

TEST(MetadataServerTest, RestartAndCrashLoseNothing) {
  auto server = MustStart();
  ASSERT_NE(server, nullptr);
  auto c = Connect(server->port());
  EXPECT_EQ(PutKey(*c, "key=plain", "1"), 200);
  EXPECT_EQ(PutKey(*c, "key=binary&ttl=600", std::string("\x00\x01\xfe", 3)), 200);
  EXPECT_EQ(PutKey(*c, "key=gone", "x"), 200);
  EXPECT_EQ(StatusOf(c->Delete("/metadata?key=gone")), 200);

  ASSERT_TRUE(server->Restart().ok());  // SIGTERM, start again on the same data
  c = Connect(server->port());
  httplib::Result got = c->Get("/metadata?key=plain");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->body, "1");
  got = c->Get("/metadata?key=binary");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->body, std::string("\x00\x01\xfe", 3));
  EXPECT_EQ(GetStatus(*c, "gone"), 404);
  EXPECT_NE(ReadFile(server->data_path()).find("expires_unix_ms"), std::string::npos);

  // Every acknowledged change is on disk: SIGKILL loses nothing either.
  EXPECT_EQ(PutKey(*c, "key=late", "2"), 200);
  server->Kill();
  ASSERT_TRUE(server->Relaunch().ok());
  c = Connect(server->port());
  EXPECT_EQ(GetStatus(*c, "late"), 200);
  EXPECT_EQ(GetStatus(*c, "plain"), 200);
}

TEST(MetadataServerTest, TtlSurvivesRestart) {
  auto server = MustStart();
  ASSERT_NE(server, nullptr);
  auto c = Connect(server->port());
  EXPECT_EQ(PutKey(*c, "key=leased&ttl=2", "v"), 200);
  ASSERT_TRUE(server->Restart().ok());
  c = Connect(server->port());
  // Still there after the restart, and it still expires: the expiry time was persisted.
  EXPECT_EQ(GetStatus(*c, "leased"), 200);
  EXPECT_TRUE(WaitFor([&] { return GetStatus(*c, "leased") == 404; }, 4s));
  ASSERT_TRUE(server->Restart().ok());
  c = Connect(server->port());
  EXPECT_EQ(GetStatus(*c, "leased"), 404);
}

// The journal beside the data file (journal.h): after a crash every acknowledged change since
// the last snapshot is back, from the journal alone (the snapshot written at the start holds
// none of them); deleted keys stay deleted, expiries hold, and a torn last record (the journal
// cut mid-record, as a crash mid-append leaves it) loses only that record.
TEST(MetadataServerTest, JournalReplaysEveryChangeAfterACrash) {
  auto server = MustStart();
  ASSERT_NE(server, nullptr);
  const std::string journal = server->data_path() + ".journal";
  auto c = Connect(server->port());
  EXPECT_EQ(PutKey(*c, "key=a", "1"), 200);
  EXPECT_EQ(PutKey(*c, "key=a", "2"), 200);  // the last value wins
  EXPECT_EQ(PutKey(*c, "key=binary&ttl=600", std::string("\x00\xff", 2)), 200);
  EXPECT_EQ(PutKey(*c, "key=gone", "x"), 200);
  EXPECT_EQ(StatusOf(c->Delete("/metadata?key=gone")), 200);
  EXPECT_EQ(PutKey(*c, "key=leased&ttl=1", "l"), 200);
  EXPECT_EQ(ReadFile(server->data_path()).find("\"key\":\"a\""), std::string::npos)
      << "the changes are expected in the journal, not in a rewritten data file";
  EXPECT_NE(ReadFile(journal).find("\"put\":\"a\""), std::string::npos);

  server->Kill();
  ASSERT_TRUE(server->Relaunch().ok());
  c = Connect(server->port());
  httplib::Result got = c->Get("/metadata?key=a");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->body, "2");
  got = c->Get("/metadata?key=binary");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->body, std::string("\x00\xff", 2));
  EXPECT_EQ(GetStatus(*c, "gone"), 404);
  // The expiry came back with the key: it still goes, a second after its PUT.
  EXPECT_TRUE(WaitFor([&] { return GetStatus(*c, "leased") == 404; }, 4s));
  // The start folded the journal into the data file.
  EXPECT_NE(ReadFile(server->data_path()).find("\"key\":\"a\""), std::string::npos);

  // A crash mid-append: the last record cut short.
  EXPECT_EQ(PutKey(*c, "key=b", "3"), 200);
  EXPECT_EQ(PutKey(*c, "key=torn", "lost"), 200);
  server->Kill();
  const std::string whole = ReadFile(journal);
  const size_t last = whole.rfind(
      "\xff"
      "FJ1");
  ASSERT_NE(last, std::string::npos);
  for (const size_t cut : {whole.size() - 3, last + 6}) {  // in the payload; in the header
    WriteFile(journal, whole.substr(0, cut));
    ASSERT_TRUE(server->Relaunch().ok()) << "cut at " << cut;
    c = Connect(server->port());
    EXPECT_EQ(GetStatus(*c, "torn"), 404) << "cut at " << cut;
    EXPECT_EQ(GetStatus(*c, "b"), 200) << "cut at " << cut;
    EXPECT_EQ(GetStatus(*c, "a"), 200) << "cut at " << cut;
    server->Kill();
  }
}

// A damaged record that intact ones follow is corruption, not a torn tail: the start fails
// naming the journal and the record's offset, and leaves both files as they were. A journal
// that follows an older data file (a compaction cut short by a crash) is skipped: its records
// are all in the newer data file, and replaying them would bring back what was deleted since.
TEST(MetadataServerTest, CorruptJournalStopsTheStartAndAStaleOneIsSkipped) {
  auto server = MustStart();
  ASSERT_NE(server, nullptr);
  const std::string journal = server->data_path() + ".journal";
  auto c = Connect(server->port());
  EXPECT_EQ(PutKey(*c, "key=x", "1"), 200);
  EXPECT_EQ(PutKey(*c, "key=y", "2"), 200);
  EXPECT_EQ(PutKey(*c, "key=z", "3"), 200);
  server->Kill();
  const std::string stale = ReadFile(journal);  // follows the data file written at the start

  // Flip a byte inside the second record's payload (x's put is the first).
  const std::string magic(
      "\xff"
      "FJ1");
  const size_t first = stale.find(magic, 1);
  const size_t second = stale.find(magic, first + 1);
  ASSERT_NE(second, std::string::npos);
  std::string corrupt = stale;
  corrupt[second + 20] ^= 0x01;
  WriteFile(journal, corrupt);
  Result<TempDir> dir = TempDir::Create("metasrv-journal");
  ASSERT_TRUE(dir.ok());
  const std::string data_before = ReadFile(server->data_path());
  std::string output;
  EXPECT_EQ(RunToExit(*dir, "--port 0 --data " + server->data_path(), &output), 2) << output;
  EXPECT_NE(output.find("corrupt journal " + journal + ": at offset " + std::to_string(second)),
            std::string::npos)
      << output;
  EXPECT_EQ(ReadFile(journal), corrupt);  // never discarded or rewritten
  EXPECT_EQ(ReadFile(server->data_path()), data_before);

  // Undamaged, it loads; a clean stop then folds it in, after x was deleted.
  WriteFile(journal, stale);
  ASSERT_TRUE(server->Relaunch().ok());
  c = Connect(server->port());
  EXPECT_EQ(GetStatus(*c, "y"), 200);
  EXPECT_EQ(StatusOf(c->Delete("/metadata?key=x")), 200);
  ASSERT_TRUE(server->Restart().ok());
  // The old journal (it puts x) beside the newer data file: x stays deleted.
  server->Kill();
  WriteFile(journal, stale);
  ASSERT_TRUE(server->Relaunch().ok());
  c = Connect(server->port());
  EXPECT_EQ(GetStatus(*c, "x"), 404);
  EXPECT_EQ(GetStatus(*c, "y"), 200);
  EXPECT_EQ(GetStatus(*c, "z"), 200);
}

// Past --journal-compact-bytes the journal is folded into the data file: the journal shrinks,
// the data file grows, and a crash after it loses nothing (nor brings back a key deleted
// before it).
TEST(MetadataServerTest, JournalCompactionLosesNothing) {
  auto server = MustStart({"--journal-compact-bytes", "4096"});
  ASSERT_NE(server, nullptr);
  const std::string journal = server->data_path() + ".journal";
  auto c = Connect(server->port());
  EXPECT_EQ(PutKey(*c, "key=doomed", "d"), 200);
  EXPECT_EQ(StatusOf(c->Delete("/metadata?key=doomed")), 200);
  const std::string value(400, 'v');
  size_t largest = 0;
  bool shrank = false;
  int keys = 0;
  // Each PUT appends ~600 bytes: the journal passes 4 KiB within a few, the data file's size
  // later (it grows with the keys), so compactions follow each other.
  while (keys < 60) {
    ASSERT_EQ(PutKey(*c, "key=k" + std::to_string(keys), value), 200);
    ++keys;
    const size_t size = ReadFile(journal).size();
    shrank = shrank || size < largest;
    largest = std::max(largest, size);
  }
  EXPECT_TRUE(shrank) << "the journal never shrank (largest " << largest << " bytes)";
  const std::string snapshot = ReadFile(server->data_path());
  EXPECT_GT(snapshot.size(), size_t{4096});
  EXPECT_NE(snapshot.find("\"key\":\"k1\""), std::string::npos);
  EXPECT_EQ(snapshot.find("doomed"), std::string::npos);

  server->Kill();
  ASSERT_TRUE(server->Relaunch().ok());
  c = Connect(server->port());
  for (int i = 0; i < keys; ++i) {
    httplib::Result got = c->Get("/metadata?key=k" + std::to_string(i));
    ASSERT_TRUE(got) << i;
    EXPECT_EQ(got->status, 200) << i;
    EXPECT_EQ(got->body, value) << i;
  }
  EXPECT_EQ(GetStatus(*c, "doomed"), 404);
}

// Concurrent writers share appends (group commit) while compactions interleave; after a crash
// every acknowledged change is there.
TEST(MetadataServerTest, ConcurrentWritesAllSurviveACrash) {
  auto server = MustStart({"--journal-compact-bytes", "8192"});
  ASSERT_NE(server, nullptr);
  constexpr int kWriters = 8;
  constexpr int kPutsEach = 25;
  std::vector<int> failures(kWriters, 0);
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      auto c = Connect(server->port());
      for (int i = 0; i < kPutsEach; ++i) {
        const std::string key = "w" + std::to_string(w) + "-" + std::to_string(i);
        if (PutKey(*c, "key=" + key + "&ttl=600", std::string(200, 'a' + w)) != 200) {
          ++failures[w];
        }
      }
    });
  }
  for (std::thread& t : writers) t.join();
  for (int w = 0; w < kWriters; ++w) EXPECT_EQ(failures[w], 0) << "writer " << w;
  server->Kill();
  ASSERT_TRUE(server->Relaunch().ok());
  auto c = Connect(server->port());
  httplib::Result health = c->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(nlohmann::json::parse(health->body)["keys"], kWriters * kPutsEach);
  httplib::Result got = c->Get("/metadata?key=w7-24");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->body, std::string(200, 'h'));
}

// A change that cannot be written (here the server's file size limit, as a full disk would
// refuse it) is answered 500 and undone; the next change rewrites both files and succeeds,
// and a restart finds exactly the acknowledged changes.
TEST(MetadataServerTest, AFailedJournalWriteIsUndone) {
  Result<TempDir> dir = TempDir::Create("metasrv-efbig");
  ASSERT_TRUE(dir.ok());
  Result<uint16_t> port = PickFreePort();
  ASSERT_TRUE(port.ok());
  const std::string data = dir->path() + "/data.json";
  const std::vector<std::string> serve = {ServerBinary(), "--port", std::to_string(*port), "--data",
                                          data};
  std::vector<std::string> limited = {"/usr/bin/env", "prlimit", "--fsize=16384"};
  limited.insert(limited.end(), serve.begin(), serve.end());
  Result<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn(limited, dir->path() + "/server.log");
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE(WaitForPort(*port, 10s)) << (*child)->LogTail();
  auto c = Connect(*port);
  EXPECT_EQ(PutKey(*c, "key=small", "1"), 200);
  EXPECT_EQ(PutKey(*c, "key=big", std::string(20000, 'b')), 500);
  EXPECT_EQ(GetStatus(*c, "big"), 404);
  EXPECT_EQ(PutKey(*c, "key=after", "2"), 200);
  EXPECT_EQ(GetStatus(*c, "small"), 200);
  (*child)->Kill();

  child = ChildProcess::Spawn(serve, dir->path() + "/server.log");
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE(WaitForPort(*port, 10s)) << (*child)->LogTail();
  c = Connect(*port);
  EXPECT_EQ(GetStatus(*c, "small"), 200);
  EXPECT_EQ(GetStatus(*c, "after"), 200);
  EXPECT_EQ(GetStatus(*c, "big"), 404);
  const int status = (*child)->Stop(5s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << (*child)->LogTail();
}

TEST(MetadataServerTest, SigtermStopsCleanly) {
  Result<TempDir> dir = TempDir::Create("metasrv-sig");
  ASSERT_TRUE(dir.ok());
  Result<uint16_t> port = PickFreePort();
  ASSERT_TRUE(port.ok());
  Result<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(
      {ServerBinary(), "--port", std::to_string(*port), "--data", dir->path() + "/data.json"},
      dir->path() + "/server.log");
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE(WaitForPort(*port, 10s)) << (*child)->LogTail();
  auto c = Connect(*port);
  EXPECT_EQ(PutKey(*c, "key=k", "v"), 200);
  const int status = (*child)->Stop(5s);
  ASSERT_TRUE(WIFEXITED(status)) << "wait status " << status << "\n" << (*child)->LogTail();
  EXPECT_EQ(WEXITSTATUS(status), 0) << (*child)->LogTail();
  EXPECT_NE((*child)->LogTail().find("ready port=" + std::to_string(*port)), std::string::npos);
  EXPECT_NE(ReadFile(dir->path() + "/data.json").find("\"key\":\"k\""), std::string::npos);
}

TEST(MetadataServerTest, PortZeroPicksAFreePortAndSaysWhich) {
  Result<TempDir> dir = TempDir::Create("metasrv-port0");
  ASSERT_TRUE(dir.ok());
  Result<std::unique_ptr<ChildProcess>> child =
      ChildProcess::Spawn({ServerBinary(), "--port", "0"}, dir->path() + "/server.log");
  ASSERT_TRUE(child.ok()) << child.status();
  std::smatch match;
  std::string log;
  const std::regex ready("ready port=([0-9]+)\n");
  ASSERT_TRUE(WaitFor(
      [&] {
        log = (*child)->LogTail();
        return std::regex_search(log, match, ready);
      },
      10s))
      << log;
  const int port = std::stoi(match[1].str());
  ASSERT_GT(port, 0);
  auto c = Connect(static_cast<uint16_t>(port));
  EXPECT_EQ(StatusOf(c->Get("/health")), 200);
  const int status = (*child)->Stop(5s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(MetadataServerTest, CorruptDataFileStopsTheStart) {
  Result<TempDir> dir = TempDir::Create("metasrv-corrupt");
  ASSERT_TRUE(dir.ok());
  Result<uint16_t> port = PickFreePort();
  ASSERT_TRUE(port.ok());
  const std::string data = dir->path() + "/data.json";
  const std::string args = "--port " + std::to_string(*port) + " --data " + data;
  for (const std::string& corrupt :
       {std::string("{\"format\":\"ferry-metadata-server\",\"version\":1,\"keys\":[{\"key\""),
        std::string(""), std::string(R"({"format":"other","version":1,"keys":[]})"),
        std::string(R"({"format":"ferry-metadata-server","version":1,"keys":[)"
                    R"({"key":"k","value_b64":"!!","expires_unix_ms":0}]})")}) {
    WriteFile(data, corrupt);
    std::string output;
    EXPECT_EQ(RunToExit(*dir, args, &output), 2) << output;
    EXPECT_NE(output.find("corrupt data file " + data), std::string::npos) << output;
    EXPECT_EQ(ReadFile(data), corrupt);  // never discarded or rewritten
  }
}

TEST(MetadataServerTest, CommandLine) {
  Result<TempDir> dir = TempDir::Create("metasrv-cli");
  ASSERT_TRUE(dir.ok());
  std::string output;
  EXPECT_EQ(RunToExit(*dir, "--help", &output), 0);
  EXPECT_NE(output.find("usage: ferry-metadata-server"), std::string::npos) << output;
  EXPECT_NE(output.find("value_b64"), std::string::npos) << output;
  for (const char* bad : {"--bogus", "--port 70000", "--port", "--max-body 0", "--path nope",
                          "stray", "--ttl=3", "--journal-compact-bytes 0"}) {
    EXPECT_EQ(RunToExit(*dir, bad, &output), 2) << bad << ": " << output;
    EXPECT_NE(output.find("usage:"), std::string::npos) << bad << ": " << output;
  }
  // An unwritable data file is a start error too.
  EXPECT_EQ(RunToExit(*dir, "--port 0 --data " + dir->path() + "/no/such/dir/data.json", &output),
            2)
      << output;
}

TEST(MetadataServerTest, CustomPath) {
  auto server = MustStart({"--path", "/v1/meta.data"});
  ASSERT_NE(server, nullptr);
  auto c = Connect(server->port());
  EXPECT_EQ(StatusOf(c->Put("/v1/meta.data?key=k", "v", "application/json")), 200);
  EXPECT_EQ(StatusOf(c->Get("/v1/meta.data?key=k")), 200);
  EXPECT_EQ(StatusOf(c->Get("/v1/metaXdata?key=k")), 404);  // '.' is literal, not a regex
  EXPECT_EQ(StatusOf(c->Get("/metadata?key=k")), 404);
}

}  // namespace
}  // namespace ferry::testing
