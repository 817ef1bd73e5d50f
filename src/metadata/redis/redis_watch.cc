#include "metadata/redis/redis_watch.h"

#include <hiredis/hiredis.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include "common/failure_log.h"
#include "common/log.h"
#include "common/mutex.h"

namespace ferry::redis {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

constexpr milliseconds kPollInterval{200};   // how often a blocked reader checks for stop
constexpr milliseconds kMinKeepalive{1000};  // PING after max(this, request_timeout) of silence
constexpr milliseconds kFirstBackoff{100};
constexpr milliseconds kMaxBackoff{2000};

bool Contains(std::string_view text, char c) { return text.find(c) != std::string_view::npos; }

// Keyspace events that remove a key, and those that give it a (new) string value.
bool IsDeleteEvent(std::string_view e) {
  return e == "del" || e == "expired" || e == "evicted" || e == "rename_from" || e == "move_from";
}
bool IsValueEvent(std::string_view e) {
  return e == "set" || e == "setrange" || e == "append" || e == "incrby" || e == "incrbyfloat" ||
         e == "rename_to" || e == "restore" || e == "copy_to" || e == "move_to";
}

// One watch: a subscriber connection read by its own thread. Thread contract: constructed and
// subscribed on the caller's thread, then the connection and mode belong to the thread until
// the destructor (any thread but the callback's) stops and joins it.
class RedisWatch final : public WatchHandle {
 public:
  RedisWatch(std::shared_ptr<RedisClient> client, std::string prefix, WatchCallback callback)
      : client_(std::move(client)),
        prefix_(std::move(prefix)),
        callback_(std::move(callback)),
        keyspace_channel_("__keyspace@" + std::to_string(client_->config().db) + "__:") {}

  ~RedisWatch() override {
    {
      MutexLock lock(mu_);
      stop_ = true;
      wake_.NotifyAll();
    }
    if (thread_.joinable()) thread_.join();
  }

  // Opens the subscriber connection, picks the mode and subscribes.
  Status Subscribe();
  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

 private:
  enum class Mode { kKeyspace, kFerryChannel };

  void Run();
  // Reads and dispatches until the subscription fails (the error) or stop (OK).
  Status Pump();
  // Reconnects with backoff until subscribed and resynced (true) or stopped (false).
  bool Recover(FailureLog& trouble);
  Status Resync();
  Status EnableKeyspaceEvents(RedisConnection& connection);
  void LogMode(Mode mode, const Status& why);
  Status Dispatch(const redisReply& message);
  Status DeliverKeyspaceEvent(std::string_view event, std::string_view key);
  Status DeliverFerryEvent(std::string_view payload);
  // GETs the key and reports kPut, or kDelete when it is gone.
  Status DeliverCurrent(std::string_view key);
  void Emit(WatchEvent event);
  bool Stopping();
  // Waits `delay` unless stopped first; false when stopped.
  bool SleepUnlessStopped(milliseconds delay);

  const std::shared_ptr<RedisClient> client_;
  const std::string prefix_;
  const WatchCallback callback_;
  const std::string keyspace_channel_;  // "__keyspace@<db>__:"
  std::unique_ptr<RedisConnection> subscriber_;
  Mode mode_ = Mode::kKeyspace;
  std::optional<Mode> logged_mode_;
  Mutex mu_;
  CondVar wake_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

Status RedisWatch::EnableKeyspaceEvents(RedisConnection& connection) {
  ASSIGN_OR_RETURN(Reply current, connection.Run({"CONFIG", "GET", "notify-keyspace-events"}));
  if (!IsArray(*current, 2)) {
    return InternalError("redis " + connection.server().ToString() +
                         ": malformed CONFIG GET reply");
  }
  const std::string flags(ReplyText(Element(*current, 1)));
  const bool enough = Contains(flags, 'K') &&
                      (Contains(flags, 'A') || (Contains(flags, '$') && Contains(flags, 'g') &&
                                                Contains(flags, 'x') && Contains(flags, 'e')));
  if (enough) return Status::Ok();
  // Keep what the server had (other users may rely on it) and add what ferry needs.
  const std::string wanted = flags + "K$gxe";
  return connection.Run({"CONFIG", "SET", "notify-keyspace-events", wanted}).status();
}

void RedisWatch::LogMode(Mode mode, const Status& why) {
  if (logged_mode_ == mode) return;
  logged_mode_ = mode;
  if (mode == Mode::kKeyspace) {
    FERRY_LOG(kInfo) << "redis watch on '" << prefix_ << "': using keyspace notifications";
  } else {
    FERRY_LOG(kWarn) << "redis watch on '" << prefix_ << "': cannot enable keyspace notifications ("
                     << why << "); falling back to channel " << kEventsChannel
                     << ", which reports only writes by ferry clients, not expiries";
  }
}

Status RedisWatch::Subscribe() {
  subscriber_.reset();
  ASSIGN_OR_RETURN(std::unique_ptr<RedisConnection> connection,
                   RedisConnection::Open(client_->config(), client_->timeout()));
  const Status keyspace = EnableKeyspaceEvents(*connection);
  // A transient refusal (LOADING after a restart) is retried; a definite one (NOPERM, unknown
  // command) means this server will not give notifications: use ferry's channel.
  if (connection->broken() || keyspace.code() == StatusCode::kUnavailable) return keyspace;
  const Mode mode = keyspace.ok() ? Mode::kKeyspace : Mode::kFerryChannel;
  const std::string pattern = keyspace_channel_ + GlobEscape(prefix_) + "*";
  const Args command =
      mode == Mode::kKeyspace ? Args{"PSUBSCRIBE", pattern} : Args{"SUBSCRIBE", kEventsChannel};
  ASSIGN_OR_RETURN(Reply reply, connection->Run(command));
  if (!IsArray(*reply, 3) || !IsString(Element(*reply, 0))) {
    return InternalError("redis " + connection->server().ToString() + ": malformed " +
                         std::string(command.front()) + " reply");
  }
  LogMode(mode, keyspace);
  mode_ = mode;
  subscriber_ = std::move(connection);
  return Status::Ok();
}

bool RedisWatch::Stopping() {
  MutexLock lock(mu_);
  return stop_;
}

bool RedisWatch::SleepUnlessStopped(milliseconds delay) {
  MutexLock lock(mu_);
  const auto deadline = SteadyClock::now() + delay;
  while (!stop_ && SteadyClock::now() < deadline) wake_.WaitUntil(mu_, deadline);
  return !stop_;
}

void RedisWatch::Run() {
  // Trouble is logged in bounded lines (when it starts, every 10 s, when the watch is back),
  // however often the text of the error changes (it carries times).
  FailureLog trouble("redis watch on '" + prefix_ + "'");
  for (;;) {
    const Status lost = Pump();
    if (Stopping()) return;
    trouble.Failed("lost its subscription (" + lost.ToString() + "); reconnecting");
    subscriber_.reset();
    if (!Recover(trouble)) return;
  }
}

bool RedisWatch::Recover(FailureLog& trouble) {
  milliseconds backoff = kFirstBackoff;
  for (;;) {
    if (!SleepUnlessStopped(backoff)) return false;
    backoff = std::min(backoff * 2, kMaxBackoff);
    Status s = Subscribe();
    // Events may have been missed while unsubscribed: report every key as it is now.
    if (s.ok()) s = Resync();
    if (s.ok()) {
      trouble.Succeeded();
      FERRY_LOG(kDebug) << "redis watch on '" << prefix_ << "' resubscribed and resynced";
      return true;
    }
    subscriber_.reset();
    trouble.Failed("cannot resubscribe yet (" + s.ToString() + "); retrying");
  }
}

Status RedisWatch::Resync() {
  ASSIGN_OR_RETURN(std::vector<KeyValue> entries, client_->List(prefix_));
  for (KeyValue& kv : entries) {
    if (Stopping()) return Status::Ok();
    Emit({WatchEvent::Type::kPut, std::move(kv.key), std::move(kv.value)});
  }
  return Status::Ok();
}

Status RedisWatch::Pump() {
  const milliseconds timeout = client_->timeout();
  const milliseconds keepalive = std::max(kMinKeepalive, timeout);
  auto last_traffic = SteadyClock::now();
  std::optional<SteadyClock::time_point> ping_sent;
  while (!Stopping()) {
    ASSIGN_OR_RETURN(Reply reply, subscriber_->TakeBuffered());
    if (reply != nullptr) {
      last_traffic = SteadyClock::now();
      ping_sent.reset();
      RETURN_IF_ERROR(Dispatch(*reply));
      continue;
    }
    pollfd p{};
    p.fd = subscriber_->fd();
    p.events = POLLIN;
    const int ready = ::poll(&p, 1, static_cast<int>(kPollInterval.count()));
    if (ready < 0 && errno != EINTR) return UnavailableError("poll: " + ErrnoText(errno));
    if (ready > 0) {
      RETURN_IF_ERROR(subscriber_->ReadAvailable());
      continue;
    }
    // Silence: a PING tells a quiet server from a vanished one.
    const auto now = SteadyClock::now();
    if (ping_sent.has_value() && now - *ping_sent > timeout) {
      return UnavailableError("redis " + subscriber_->server().ToString() +
                              ": no answer to PING within " + std::to_string(timeout.count()) +
                              " ms");
    }
    if (!ping_sent.has_value() && now - last_traffic > keepalive) {
      RETURN_IF_ERROR(subscriber_->Send({"PING"}));
      ping_sent = now;
    }
  }
  return Status::Ok();
}

Status RedisWatch::Dispatch(const redisReply& message) {
  if (!IsArray(message, 3)) return Status::Ok();
  const std::string_view kind = ReplyText(Element(message, 0));
  if (kind == "pmessage" && mode_ == Mode::kKeyspace && IsArray(message, 4)) {
    const std::string_view channel = ReplyText(Element(message, 2));
    if (!channel.starts_with(keyspace_channel_)) return Status::Ok();
    return DeliverKeyspaceEvent(ReplyText(Element(message, 3)),
                                channel.substr(keyspace_channel_.size()));
  }
  if (kind == "message" && mode_ == Mode::kFerryChannel) {
    return DeliverFerryEvent(ReplyText(Element(message, 2)));
  }
  return Status::Ok();  // subscribe confirmations, PING answers
}

Status RedisWatch::DeliverKeyspaceEvent(std::string_view event, std::string_view key) {
  if (!key.starts_with(prefix_)) return Status::Ok();
  if (IsDeleteEvent(event)) {
    Emit({WatchEvent::Type::kDelete, std::string(key), {}});
    return Status::Ok();
  }
  if (IsValueEvent(event)) return DeliverCurrent(key);
  return Status::Ok();  // expire, persist, ...: the value did not change
}

Status RedisWatch::DeliverFerryEvent(std::string_view payload) {
  // "<op> <db> <key>"; the key may hold spaces.
  const size_t op_end = payload.find(' ');
  if (op_end == std::string_view::npos) return Status::Ok();
  const size_t db_end = payload.find(' ', op_end + 1);
  if (db_end == std::string_view::npos) return Status::Ok();
  const std::string_view op = payload.substr(0, op_end);
  const std::string_view db = payload.substr(op_end + 1, db_end - op_end - 1);
  const std::string_view key = payload.substr(db_end + 1);
  if (db != std::to_string(client_->config().db) || !key.starts_with(prefix_)) {
    return Status::Ok();
  }
  if (op == "del") {
    Emit({WatchEvent::Type::kDelete, std::string(key), {}});
    return Status::Ok();
  }
  if (op == "set") return DeliverCurrent(key);
  return Status::Ok();
}

Status RedisWatch::DeliverCurrent(std::string_view key) {
  Result<std::string> value = client_->Get(key);
  if (value.ok()) {
    Emit({WatchEvent::Type::kPut, std::string(key), std::move(value).value()});
    return Status::Ok();
  }
  if (value.status().code() == StatusCode::kNotFound) {
    Emit({WatchEvent::Type::kDelete, std::string(key), {}});
    return Status::Ok();
  }
  // Unreachable: resubscribe and resync. Anything else (WRONGTYPE: not ferry's; NOPERM) would
  // fail again on a retry, so the event is skipped.
  if (value.status().code() == StatusCode::kUnavailable) return value.status();
  FERRY_LOG(kDebug) << "redis watch on '" << prefix_ << "': skipping an event: " << value.status();
  return Status::Ok();
}

void RedisWatch::Emit(WatchEvent event) {
  try {
    callback_(event);
  } catch (const std::exception& e) {
    FERRY_LOG(kWarn) << "redis watch on '" << prefix_ << "': callback threw: " << e.what();
  } catch (...) {
    FERRY_LOG(kWarn) << "redis watch on '" << prefix_ << "': callback threw";
  }
}

}  // namespace

Result<std::unique_ptr<WatchHandle>> RedisWatcher::Watch(std::string_view prefix,
                                                         WatchCallback callback) {
  if (!callback) return InvalidArgumentError("watch needs a callback");
  auto watch = std::make_unique<RedisWatch>(client_, std::string(prefix), std::move(callback));
  RETURN_IF_ERROR(watch->Subscribe());
  watch->Start();
  return std::unique_ptr<WatchHandle>(std::move(watch));
}

}  // namespace ferry::redis
