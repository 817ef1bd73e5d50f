// Internal to the redis plug-in: one hiredis connection (RedisConnection), a pool of them with
// the data operations the store and its watches share (RedisClient), and reply helpers.
// hiredis itself stays in this folder's .cc files; this header only forward-declares it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "ferry/status.h"
#include "metadata/metadata_store.h"
#include "metadata/redis/redis_store.h"

struct redisContext;
struct redisReply;

namespace ferry::redis {

struct ReplyDeleter {
  void operator()(redisReply* reply) const;
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// One command's arguments. Binary-safe views, borrowed for the duration of the call.
using Args = std::vector<std::string_view>;

// The pub/sub channel every ferry Put/Delete is announced on: "set <db> <key>" / "del <db> <key>".
inline constexpr std::string_view kEventsChannel = "ferry:events";

// What one reply may make this process hold, so that a hostile or broken server cannot grow it
// without bound: the bytes of its strings together, the bytes buffered while a string (or a
// line) is still arriving, and its reply objects (every element, plus every array slot an
// announced count allocates before the elements come). A reply over either limit breaks the
// connection with kInternal naming the limit.
inline constexpr size_t kMaxRedisReplyBytes = size_t{64} << 20;
inline constexpr size_t kMaxRedisReplyObjects = size_t{1} << 20;

// What the reply being read holds so far (RedisConnection's; counted by its reply hooks).
struct ReplyBudget {
  size_t objects = 0;
  uint64_t string_bytes = 0;
  bool exceeded = false;
  // Counts `objects` more and `bytes` more string bytes; false (and `exceeded`) past a limit.
  bool Take(size_t more_objects, uint64_t more_bytes);
};

// Escapes redis glob metacharacters (* ? [ ] \) so that `text` matches only itself in a SCAN
// MATCH or PSUBSCRIBE pattern.
std::string GlobEscape(std::string_view text);

// Reply accessors: the string payload of a STRING/STATUS/ERROR reply ("" otherwise).
std::string_view ReplyText(const redisReply& reply);
bool IsArray(const redisReply& reply, size_t min_elements);
bool IsString(const redisReply& reply);
const redisReply& Element(const redisReply& reply, size_t i);

// One synchronous, authenticated connection on the configured db. Every send and receive is
// bounded by the timeout given to Open, and every reply by kMaxRedisReplyBytes and
// kMaxRedisReplyObjects. After an I/O error, a timeout or a reply over the limits broken() is
// true and the connection must be discarded. Thread contract: one thread at a time.
class RedisConnection {
 public:
  // Connects within `timeout`, then AUTH (when a password is configured) and SELECT (db != 0).
  // kUnavailable: not reachable / no answer in time; kPermissionDenied: credentials refused.
  static Result<std::unique_ptr<RedisConnection>> Open(const RedisConfig& config,
                                                       std::chrono::milliseconds timeout);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Sends one command and reads its reply. An error reply becomes a Status (see
  // ErrorReplyStatus); an I/O error or timeout is kUnavailable.
  Result<Reply> Run(const Args& args);
  // Sends every command, then reads their replies in order: one round trip. All replies are
  // read even when one is an error reply; the first error is returned.
  Result<std::vector<Reply>> RunAll(const std::vector<Args>& commands);

  // For subscribers, which read on their own schedule:
  // Sends a command without reading its reply.
  Status Send(const Args& args);
  // A reply already received and parsed, or null when none is buffered.
  Result<Reply> TakeBuffered();
  // Reads what the socket holds (call when poll() reports fd() readable); kUnavailable on EOF.
  Status ReadAvailable();
  int fd() const;

  bool broken() const { return broken_; }
  bool timed_out() const { return timed_out_; }
  bool over_limit() const { return over_limit_; }
  const HostPort& server() const { return server_; }

 private:
  RedisConnection(redisContext* context, HostPort server);
  // Marks the connection broken; kUnavailable naming the server, `what` and hiredis' error.
  Status IoError(std::string_view what, int saved_errno);
  Status Flush(std::string_view what);
  // Reads until one whole reply is parsed, within the reply limits. `what` names the command.
  Result<Reply> ReadReply(std::string_view what);
  // The reader's parse error (or the exceeded limit) for `what`; marks the connection broken.
  Status ParseError(std::string_view what);
  // Breaks the connection when the bytes buffered for an unfinished reply pass the limit.
  Status CheckBuffered(std::string_view what);

  redisContext* context_;  // owned
  const HostPort server_;
  ReplyBudget budget_;  // of the reply being parsed; reset when one completes
  bool broken_ = false;
  bool timed_out_ = false;
  bool over_limit_ = false;  // broken by a reply over the limits (a fresh connection won't help)
};

// The error reply `reply` as a Status: kUnavailable for transient server states (LOADING,
// BUSY, MASTERDOWN, TRYAGAIN, ...), kPermissionDenied for NOAUTH / WRONGPASS / NOPERM, and
// kInternal otherwise. `what` names the command in the message.
Status ErrorReplyStatus(const redisReply& reply, std::string_view what, const HostPort& server);

// The data operations over a small pool of connections. A call takes an idle connection (or
// opens one), and a connection that broke is dropped, so the next call reconnects. A call that
// found a pooled connection closed by the server (a restart) retries once on a fresh one.
// Every round trip is bounded by `timeout`. Thread contract: thread-safe.
class RedisClient {
 public:
  RedisClient(RedisConfig config, std::chrono::milliseconds timeout)
      : config_(std::move(config)), timeout_(timeout) {}
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  const RedisConfig& config() const { return config_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  Result<Reply> Run(const Args& args);
  Result<std::vector<Reply>> RunAll(const std::vector<Args>& commands);

  // GET; kNotFound when the key is absent.
  Result<std::string> Get(std::string_view key);
  // SCAN MATCH <escaped prefix>* then MGET; sorted; keys deleted in between are skipped.
  Result<std::vector<KeyValue>> List(std::string_view prefix);
  // SET each key (with PX `ttl` when ttl > 0, which a lease needs; without, which clears any
  // TTL) and PUBLISH it on kEventsChannel, in one round trip.
  Status Set(const std::vector<KeyValue>& entries, std::chrono::milliseconds ttl);
  // DEL the keys and PUBLISH each on kEventsChannel, in one round trip. Absent keys are fine.
  Status Del(const std::vector<std::string>& keys);
  // PEXPIRE each key; the result says, per key, whether it still existed.
  Result<std::vector<bool>> Expire(const std::vector<std::string>& keys,
                                   std::chrono::milliseconds ttl);
  // The kEventsChannel message announcing `op` ("set" / "del") of `key` in this client's db.
  std::string EventMessage(std::string_view op, std::string_view key) const;

 private:
  template <typename T, typename Fn>
  Result<T> WithConnection(Fn&& fn);
  Result<std::unique_ptr<RedisConnection>> Acquire(bool allow_idle, bool* reused);
  void Release(std::unique_ptr<RedisConnection> connection);
  void DropIdle();

  const RedisConfig config_;
  const std::chrono::milliseconds timeout_;
  Mutex mu_;
  std::vector<std::unique_ptr<RedisConnection>> idle_ GUARDED_BY(mu_);
};

}  // namespace ferry::redis
