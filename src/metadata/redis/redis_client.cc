#include "metadata/redis/redis_client.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/connect_error.h"

namespace ferry::redis {
namespace {

constexpr size_t kMaxIdleConnections = 4;
constexpr size_t kMgetBatch = 256;
constexpr std::string_view kScanCount = "1000";

timeval ToTimeval(std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  return tv;
}

// Argument vectors in the form hiredis takes them; views into `args`.
struct ArgVector {
  explicit ArgVector(const Args& args) {
    for (std::string_view a : args) {
      data.push_back(a.data());
      lengths.push_back(a.size());
    }
  }
  int count() const { return static_cast<int>(data.size()); }
  std::vector<const char*> data;
  std::vector<size_t> lengths;
};

// hiredis writes with write(), so a write to a connection the server closed raises SIGPIPE,
// which kills a process that did not ignore it. A library may not install signal handlers, so
// each socket operation blocks SIGPIPE on its own thread and discards one it caused.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigemptyset(&pending);
    was_pending_ = sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
    blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  }
  ~SigpipeBlock() {
    if (!blocked_) return;
    sigset_t pending;
    sigemptyset(&pending);
    if (!was_pending_ && sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
      const timespec now{};
      while (sigtimedwait(&pipe_, nullptr, &now) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool was_pending_ = false;
  bool blocked_ = false;
};

// hiredis builds reply objects through a table of functions. The connection replaces it with
// these, which count each object against the budget of the reply being read (t_budget, set
// around every parse on this thread) before hiredis' own functions build it. A refusal (null)
// makes hiredis stop parsing with an error, before it allocates what was announced.
thread_local ReplyBudget* t_budget = nullptr;

const redisReplyObjectFunctions* DefaultReplyFunctions() {
  static const redisReplyObjectFunctions* const defaults = [] {
    redisReader* reader = redisReaderCreate();
    const redisReplyObjectFunctions* fn = reader != nullptr ? reader->fn : nullptr;
    if (reader != nullptr) redisReaderFree(reader);
    return fn;
  }();
  return defaults;
}

bool Allow(size_t objects, uint64_t bytes) {
  return t_budget == nullptr || t_budget->Take(objects, bytes);
}

void* CreateString(const redisReadTask* task, char* str, size_t len) {
  return Allow(1, len) ? DefaultReplyFunctions()->createString(task, str, len) : nullptr;
}
void* CreateArray(const redisReadTask* task, int elements) {
  // The slots of an announced count are allocated at once: they count before any element.
  const size_t slots = elements > 0 ? static_cast<size_t>(elements) : 0;
  return Allow(1 + slots, 0) ? DefaultReplyFunctions()->createArray(task, elements) : nullptr;
}
void* CreateInteger(const redisReadTask* task, long long value) {
  return Allow(1, 0) ? DefaultReplyFunctions()->createInteger(task, value) : nullptr;
}
void* CreateNil(const redisReadTask* task) {
  return Allow(1, 0) ? DefaultReplyFunctions()->createNil(task) : nullptr;
}
void FreeObject(void* reply) { DefaultReplyFunctions()->freeObject(reply); }

// Never written; not const only because hiredis takes the table through a non-const pointer.
redisReplyObjectFunctions kBoundedReplyFunctions = {CreateString, CreateArray, CreateInteger,
                                                    CreateNil, FreeObject};

// Points t_budget at one connection's budget for a scope.
class BudgetScope {
 public:
  explicit BudgetScope(ReplyBudget* budget) : previous_(std::exchange(t_budget, budget)) {}
  ~BudgetScope() { t_budget = previous_; }
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  ReplyBudget* previous_;
};

}  // namespace

bool ReplyBudget::Take(size_t more_objects, uint64_t more_bytes) {
  if (more_objects > kMaxRedisReplyObjects - objects ||
      more_bytes > kMaxRedisReplyBytes - string_bytes) {
    exceeded = true;
    return false;
  }
  objects += more_objects;
  string_bytes += more_bytes;
  return true;
}

void ReplyDeleter::operator()(redisReply* reply) const { freeReplyObject(reply); }

std::string GlobEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string_view ReplyText(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_STRING && reply.type != REDIS_REPLY_STATUS &&
      reply.type != REDIS_REPLY_ERROR) {
    return {};
  }
  return reply.str == nullptr ? std::string_view() : std::string_view(reply.str, reply.len);
}

bool IsArray(const redisReply& reply, size_t min_elements) {
  return reply.type == REDIS_REPLY_ARRAY && reply.elements >= min_elements;
}

bool IsString(const redisReply& reply) { return reply.type == REDIS_REPLY_STRING; }

const redisReply& Element(const redisReply& reply, size_t i) { return *reply.element[i]; }

Status ErrorReplyStatus(const redisReply& reply, std::string_view what, const HostPort& server) {
  const std::string_view text = ReplyText(reply);
  const std::string_view code = text.substr(0, text.find(' '));
  std::string message =
      "redis " + server.ToString() + " " + std::string(what) + ": " + std::string(text);
  for (std::string_view transient :
       {"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "READONLY"}) {
    if (code == transient) return UnavailableError(std::move(message));
  }
  if (code == "NOAUTH" || code == "WRONGPASS" || code == "NOPERM" ||
      text.find("invalid password") != std::string_view::npos ||
      text.find("without any password configured") != std::string_view::npos) {
    return PermissionDeniedError(std::move(message));
  }
  return InternalError(std::move(message));
}

namespace {

// What became of a failed connect, from hiredis' error and the time it really took: "connection
// refused (after 1 ms)", "no route to host (after 3071 ms)", "timed out after 1000 ms", "cannot
// resolve 'h': Name or service not known".
std::string ConnectErrorText(const redisContext& context, const HostPort& server,
                             std::chrono::steady_clock::duration elapsed,
                             std::chrono::milliseconds timeout) {
  std::string text = context.errstr;
  // hiredis reports a failed connect() on some paths as REDIS_ERR_OTHER "Can't create socket:
  // <strerror>", and a failed getaddrinfo as REDIS_ERR_OTHER with gai_strerror's text.
  constexpr std::string_view kSocketPrefix = "Can't create socket: ";
  if (text.rfind(kSocketPrefix, 0) == 0) {
    text.erase(0, kSocketPrefix.size());
  } else if (context.err == REDIS_ERR_OTHER) {
    return "cannot resolve '" + server.host + "': " + text;
  }
  if (elapsed >= timeout || text.find("timed out") != std::string::npos) {
    return "timed out after " + MillisText(elapsed);
  }
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text + " (after " + MillisText(elapsed) + ")";
}

}  // namespace

// ---- RedisConnection ------------------------------------------------------------------------

Result<std::unique_ptr<RedisConnection>> RedisConnection::Open(const RedisConfig& config,
                                                               std::chrono::milliseconds timeout) {
  const timeval tv = ToTimeval(timeout);
  const auto started = std::chrono::steady_clock::now();
  redisContext* context =
      redisConnectWithTimeout(config.server.host.c_str(), config.server.port, tv);
  if (context == nullptr) {
    return UnavailableError("redis " + config.server.ToString() + ": cannot allocate a connection");
  }
  std::unique_ptr<RedisConnection> connection(new RedisConnection(context, config.server));
  if (context->err != 0) {
    return UnavailableError("cannot connect to redis " + config.server.ToString() + ": " +
                            ConnectErrorText(*context, config.server,
                                             std::chrono::steady_clock::now() - started, timeout));
  }
  if (redisSetTimeout(context, tv) != REDIS_OK) {
    return connection->IoError("setting the socket timeout", errno);
  }
  if (!config.password.empty() || !config.user.empty()) {
    const Args auth = config.user.empty() ? Args{"AUTH", config.password}
                                          : Args{"AUTH", config.user, config.password};
    Result<Reply> reply = connection->Run(auth);
    if (!reply.ok()) {
      const std::string as = config.user.empty() ? "" : " as user '" + config.user + "'";
      return Status(reply.status().code(), "authenticating" + as + ": " + reply.status().message());
    }
  }
  if (config.db != 0) {
    const std::string db = std::to_string(config.db);
    RETURN_IF_ERROR(connection->Run({"SELECT", db}));
  }
  return connection;
}

RedisConnection::RedisConnection(redisContext* context, HostPort server)
    : context_(context), server_(std::move(server)) {
  if (context_->reader != nullptr && DefaultReplyFunctions() != nullptr) {
    context_->reader->fn = &kBoundedReplyFunctions;
  }
}

RedisConnection::~RedisConnection() { redisFree(context_); }

Status RedisConnection::ParseError(std::string_view what) {
  broken_ = true;
  if (budget_.exceeded) {
    over_limit_ = true;
    return InternalError("redis " + server_.ToString() + " " + std::string(what) +
                         ": the reply exceeds the client's limits (" +
                         std::to_string(kMaxRedisReplyBytes) + " bytes, " +
                         std::to_string(kMaxRedisReplyObjects) +
                         " elements, or a line too long for its type); not read, connection "
                         "closed");
  }
  return UnavailableError("redis " + server_.ToString() + " " + std::string(what) +
                          ": protocol error: " + context_->reader->errstr);
}

Status RedisConnection::CheckBuffered(std::string_view what) {
  // hiredis rescans an unfinished line on every read, so a line is held to a length that keeps
  // that cheap: a length or integer line to kMaxNumberLine, a status or error line to
  // kMaxTextLine. A bulk string's payload (after its length line) may take up to the reply limit.
  constexpr size_t kMaxNumberLine = 32;
  constexpr size_t kMaxTextLine = 64 << 10;
  const redisReader& reader = *context_->reader;
  const size_t unconsumed = reader.len - reader.pos;
  size_t limit = kMaxRedisReplyBytes;
  if (reader.ridx >= 0) {
    switch (reader.rstack[reader.ridx].type) {
      case REDIS_REPLY_STRING:
      case REDIS_REPLY_ARRAY:
      case REDIS_REPLY_INTEGER:
        if (std::memchr(reader.buf + reader.pos, '\n', std::min(unconsumed, kMaxNumberLine)) ==
            nullptr) {
          limit = kMaxNumberLine;
        }
        break;
      case REDIS_REPLY_STATUS:
      case REDIS_REPLY_ERROR:
        limit = kMaxTextLine;
        break;
      default:
        break;
    }
  }
  if (unconsumed <= limit) return Status::Ok();
  budget_.exceeded = true;
  return ParseError(what);
}

Result<Reply> RedisConnection::ReadReply(std::string_view what) {
  const BudgetScope scope(&budget_);
  for (;;) {
    void* raw = nullptr;
    if (redisReaderGetReply(context_->reader, &raw) != REDIS_OK) return ParseError(what);
    if (raw != nullptr) {
      budget_ = {};
      return Reply(static_cast<redisReply*>(raw));
    }
    RETURN_IF_ERROR(CheckBuffered(what));
    if (redisBufferRead(context_) != REDIS_OK) return IoError(what, errno);
  }
}

Status RedisConnection::IoError(std::string_view what, int saved_errno) {
  broken_ = true;
  timed_out_ =
      context_->err == REDIS_ERR_IO && (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK);
  std::string detail = timed_out_ ? "no answer in time" : std::string(context_->errstr);
  return UnavailableError("redis " + server_.ToString() + " " + std::string(what) + ": " + detail);
}

Status RedisConnection::Flush(std::string_view what) {
  const SigpipeBlock no_sigpipe;
  int done = 0;
  while (done == 0) {
    if (redisBufferWrite(context_, &done) != REDIS_OK) return IoError(what, errno);
  }
  return Status::Ok();
}

Result<Reply> RedisConnection::Run(const Args& args) {
  ASSIGN_OR_RETURN(std::vector<Reply> replies, RunAll({args}));
  Reply reply = std::move(replies.front());
  if (reply->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(*reply, args.front(), server_);
  return reply;
}

Result<std::vector<Reply>> RedisConnection::RunAll(const std::vector<Args>& commands) {
  if (broken_) return UnavailableError("redis " + server_.ToString() + ": connection broken");
  for (const Args& args : commands) {
    ArgVector argv(args);
    if (redisAppendCommandArgv(context_, argv.count(), argv.data.data(), argv.lengths.data()) !=
        REDIS_OK) {
      return IoError("sending " + std::string(args.front()), errno);
    }
  }
  if (commands.empty()) return std::vector<Reply>();
  RETURN_IF_ERROR(Flush(commands.front().front()));
  std::vector<Reply> replies;
  replies.reserve(commands.size());
  for (const Args& args : commands) {
    ASSIGN_OR_RETURN(Reply reply, ReadReply(args.front()));
    replies.push_back(std::move(reply));
  }
  return replies;
}

Status RedisConnection::Send(const Args& args) {
  if (broken_) return UnavailableError("redis " + server_.ToString() + ": connection broken");
  ArgVector argv(args);
  if (redisAppendCommandArgv(context_, argv.count(), argv.data.data(), argv.lengths.data()) !=
      REDIS_OK) {
    return IoError("sending " + std::string(args.front()), errno);
  }
  return Flush(args.front());
}

Result<Reply> RedisConnection::TakeBuffered() {
  if (broken_) return UnavailableError("redis " + server_.ToString() + ": connection broken");
  const BudgetScope scope(&budget_);
  void* raw = nullptr;
  if (redisReaderGetReply(context_->reader, &raw) != REDIS_OK) return ParseError("message");
  if (raw != nullptr) budget_ = {};  // the budget of a message spans reads until it completes
  return Reply(static_cast<redisReply*>(raw));
}

Status RedisConnection::ReadAvailable() {
  if (broken_) return UnavailableError("redis " + server_.ToString() + ": connection broken");
  if (redisBufferRead(context_) != REDIS_OK) return IoError("read", errno);
  return CheckBuffered("message");
}

int RedisConnection::fd() const { return context_->fd; }

// ---- RedisClient ----------------------------------------------------------------------------

Result<std::unique_ptr<RedisConnection>> RedisClient::Acquire(bool allow_idle, bool* reused) {
  if (allow_idle) {
    MutexLock lock(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<RedisConnection> connection = std::move(idle_.back());
      idle_.pop_back();
      *reused = true;
      return connection;
    }
  }
  *reused = false;
  return RedisConnection::Open(config_, timeout_);
}

void RedisClient::Release(std::unique_ptr<RedisConnection> connection) {
  if (connection->broken()) return;
  MutexLock lock(mu_);
  if (idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(connection));
}

void RedisClient::DropIdle() {
  std::vector<std::unique_ptr<RedisConnection>> stale;
  MutexLock lock(mu_);
  stale.swap(idle_);
}

template <typename T, typename Fn>
Result<T> RedisClient::WithConnection(Fn&& fn) {
  for (int attempt = 0;; ++attempt) {
    bool reused = false;
    ASSIGN_OR_RETURN(std::unique_ptr<RedisConnection> connection, Acquire(attempt == 0, &reused));
    Result<T> result = fn(*connection);
    // A pooled connection the server closed (restart, idle timeout) says nothing about the
    // server now: every idle one is probably stale too, so retry once on a fresh connection.
    if (connection->broken() && reused && !connection->timed_out() && !connection->over_limit()) {
      DropIdle();
      continue;
    }
    Release(std::move(connection));
    return result;
  }
}

Result<Reply> RedisClient::Run(const Args& args) {
  return WithConnection<Reply>([&](RedisConnection& c) { return c.Run(args); });
}

Result<std::vector<Reply>> RedisClient::RunAll(const std::vector<Args>& commands) {
  return WithConnection<std::vector<Reply>>([&](RedisConnection& c) { return c.RunAll(commands); });
}

Result<std::string> RedisClient::Get(std::string_view key) {
  ASSIGN_OR_RETURN(Reply reply, Run({"GET", key}));
  if (reply->type == REDIS_REPLY_NIL) {
    return NotFoundError("redis " + config_.server.ToString() + ": no key '" + std::string(key) +
                         "'");
  }
  if (!IsString(*reply)) {
    return InternalError("redis " + config_.server.ToString() + ": GET '" + std::string(key) +
                         "' answered with reply type " + std::to_string(reply->type));
  }
  return std::string(ReplyText(*reply));
}

Result<std::vector<KeyValue>> RedisClient::List(std::string_view prefix) {
  const std::string pattern = GlobEscape(prefix) + "*";
  std::vector<std::string> keys;
  std::string cursor = "0";
  do {
    ASSIGN_OR_RETURN(Reply reply, Run({"SCAN", cursor, "MATCH", pattern, "COUNT", kScanCount}));
    if (!IsArray(*reply, 2) || !IsString(Element(*reply, 0)) || !IsArray(Element(*reply, 1), 0)) {
      return InternalError("redis " + config_.server.ToString() + ": malformed SCAN reply");
    }
    const redisReply& batch = Element(*reply, 1);
    for (size_t i = 0; i < batch.elements; ++i) {
      const std::string_view key = ReplyText(Element(batch, i));
      if (IsString(Element(batch, i)) && key.starts_with(prefix)) keys.emplace_back(key);
    }
    cursor = std::string(ReplyText(Element(*reply, 0)));
  } while (cursor != "0");
  // SCAN may return a key more than once.
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());

  std::vector<KeyValue> out;
  for (size_t begin = 0; begin < keys.size(); begin += kMgetBatch) {
    const size_t end = std::min(keys.size(), begin + kMgetBatch);
    Args mget = {"MGET"};
    for (size_t i = begin; i < end; ++i) mget.push_back(keys[i]);
    ASSIGN_OR_RETURN(Reply reply, Run(mget));
    if (!IsArray(*reply, end - begin)) {
      return InternalError("redis " + config_.server.ToString() + ": malformed MGET reply");
    }
    for (size_t i = begin; i < end; ++i) {
      const redisReply& value = Element(*reply, i - begin);
      // Nil: deleted since SCAN (or not a string), so not listed.
      if (IsString(value)) out.push_back({keys[i], std::string(ReplyText(value))});
    }
  }
  return out;
}

std::string RedisClient::EventMessage(std::string_view op, std::string_view key) const {
  return std::string(op) + " " + std::to_string(config_.db) + " " + std::string(key);
}

Status RedisClient::Set(const std::vector<KeyValue>& entries, std::chrono::milliseconds ttl) {
  const std::string ttl_text = std::to_string(ttl.count());
  std::vector<std::string> messages;
  messages.reserve(entries.size());  // `commands` holds views into these
  std::vector<Args> commands;
  for (const KeyValue& e : entries) {
    if (ttl.count() > 0) {
      commands.push_back({"SET", e.key, e.value, "PX", ttl_text});
    } else {
      commands.push_back({"SET", e.key, e.value});
    }
    messages.push_back(EventMessage("set", e.key));
    commands.push_back({"PUBLISH", kEventsChannel, messages.back()});
  }
  ASSIGN_OR_RETURN(std::vector<Reply> replies, RunAll(commands));
  // Only the SETs decide: a server whose ACL forbids PUBLISH costs fallback watchers their
  // events, not the write.
  for (size_t i = 0; i < replies.size(); i += 2) {
    if (replies[i]->type == REDIS_REPLY_ERROR) {
      return ErrorReplyStatus(*replies[i], "SET", config_.server);
    }
  }
  return Status::Ok();
}

Status RedisClient::Del(const std::vector<std::string>& keys) {
  if (keys.empty()) return Status::Ok();
  std::vector<std::string> messages;
  messages.reserve(keys.size());
  std::vector<Args> commands(1, Args{"DEL"});
  for (const std::string& key : keys) {
    commands.front().push_back(key);
    messages.push_back(EventMessage("del", key));
    commands.push_back({"PUBLISH", kEventsChannel, messages.back()});
  }
  ASSIGN_OR_RETURN(std::vector<Reply> replies, RunAll(commands));
  if (replies.front()->type == REDIS_REPLY_ERROR) {
    return ErrorReplyStatus(*replies.front(), "DEL", config_.server);
  }
  return Status::Ok();
}

Result<std::vector<bool>> RedisClient::Expire(const std::vector<std::string>& keys,
                                              std::chrono::milliseconds ttl) {
  const std::string ttl_text = std::to_string(ttl.count());
  std::vector<Args> commands;
  for (const std::string& key : keys) commands.push_back({"PEXPIRE", key, ttl_text});
  ASSIGN_OR_RETURN(std::vector<Reply> replies, RunAll(commands));
  std::vector<bool> alive;
  for (const Reply& reply : replies) {
    if (reply->type == REDIS_REPLY_ERROR) {
      return ErrorReplyStatus(*reply, "PEXPIRE", config_.server);
    }
    if (reply->type != REDIS_REPLY_INTEGER) {
      return InternalError("redis " + config_.server.ToString() + ": malformed PEXPIRE reply");
    }
    alive.push_back(reply->integer == 1);
  }
  return alive;
}

}  // namespace ferry::redis
