#include "metadata/etcd/etcd_watch.h"

#include <algorithm>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/failure_log.h"
#include "common/log.h"
#include "common/mutex.h"
#include "core/base64.h"
#include "metadata/etcd/json_object_stream.h"
#include "metadata/httplib_error_text.h"

namespace ferry {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr std::chrono::milliseconds kMinBackoff = 50ms;
constexpr std::chrono::milliseconds kMaxBackoff = 1000ms;
// How often the destructor re-shuts the stream's socket while waiting for the thread.
constexpr std::chrono::milliseconds kStopPoll = 20ms;
// Read timeout on the stream: a connection silent this long (idle, half-open after a partition,
// or an endpoint that accepts but never answers) is replaced by a new one resuming from the same
// revision (on the next endpoint if it never answered). At least kMinStreamSilence.
constexpr std::chrono::seconds kMinStreamSilence = 10s;
constexpr int kStreamSilenceTimeouts = 3;  // request timeouts

// The watch of one prefix. Thread contract: the constructor and destructor run on the owner's
// thread; everything else on the watch thread, except stop_/done_/active_ (under mu_).
class EtcdWatch final : public WatchHandle {
 public:
  EtcdWatch(std::shared_ptr<EtcdClient> client, std::string_view prefix, WatchCallback callback,
            int64_t start_revision)
      : client_(std::move(client)),
        prefix_(prefix),
        key_(prefix.empty() ? std::string(1, '\0') : std::string(prefix)),
        range_end_(EtcdPrefixEnd(prefix)),
        callback_(std::move(callback)),
        next_revision_(start_revision) {}

  // Stops the thread: sets stop_, then shuts the stream's socket until the thread has left.
  ~EtcdWatch() override;

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }

 private:
  enum class StreamEnd { kStopped, kResync, kBroken };

  void Run();
  // Holds one watch stream on endpoint `index` until it ends; `*why` says why it broke,
  // `*established` whether etcd accepted the watch (created or delivered events).
  StreamEnd Stream(size_t index, std::string* why, bool* established);
  // Handles one streamed message; false ends the stream with `*end`.
  bool OnMessage(std::string_view text, const HostPort& endpoint, StreamEnd* end, std::string* why,
                 bool* established);
  // Reports a kPut for every key under the prefix and moves next_revision_ past the listing.
  Status Resync();
  void Deliver(const WatchEvent& event);
  bool stopping() const;
  // Waits `d` or until the destructor asks the thread to stop.
  void Sleep(std::chrono::milliseconds d);

  const std::shared_ptr<EtcdClient> client_;
  const std::string prefix_;
  const std::string key_;
  const std::string range_end_;
  const WatchCallback callback_;
  int64_t next_revision_;  // watch thread only: the first revision not yet delivered; 0 = resync

  mutable Mutex mu_;
  CondVar wake_;
  bool stop_ GUARDED_BY(mu_) = false;
  bool done_ GUARDED_BY(mu_) = false;
  std::shared_ptr<httplib::Client> active_ GUARDED_BY(mu_);  // the stream's client, if any
  std::thread thread_;
};

EtcdWatch::~EtcdWatch() {
  {
    MutexLock lock(mu_);
    stop_ = true;
    wake_.NotifyAll();
  }
  for (;;) {
    std::shared_ptr<httplib::Client> active;
    {
      MutexLock lock(mu_);
      if (done_) break;
      active = active_;
    }
    // Shuts the socket down under httplib's own lock, so a blocked read returns at once. Repeated
    // because a stream may be connecting right now (its socket is not there yet).
    if (active != nullptr) active->stop();
    MutexLock lock(mu_);
    if (!done_) wake_.WaitUntil(mu_, std::chrono::steady_clock::now() + kStopPoll);
  }
  if (thread_.joinable()) thread_.join();
}

bool EtcdWatch::stopping() const {
  MutexLock lock(mu_);
  return stop_;
}

void EtcdWatch::Sleep(std::chrono::milliseconds d) {
  MutexLock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() + d;
  while (!stop_ && std::chrono::steady_clock::now() < deadline) wake_.WaitUntil(mu_, deadline);
}

void EtcdWatch::Deliver(const WatchEvent& event) {
  try {
    callback_(event);
  } catch (const std::exception& e) {
    FERRY_LOG(kWarn) << "etcd watch of '" << prefix_ << "': callback threw: " << e.what();
  } catch (...) {
    FERRY_LOG(kWarn) << "etcd watch of '" << prefix_ << "': callback threw";
  }
}

void EtcdWatch::Run() {
  const size_t n = client_->endpoints().size();
  size_t index = client_->preferred() % n;
  std::chrono::milliseconds backoff = kMinBackoff;
  // Trouble is logged in bounded lines (when it starts, every 10 s, when the watch is back),
  // however often the text of the error changes (it carries times).
  FailureLog trouble("etcd watch of '" + prefix_ + "'");
  while (!stopping()) {
    if (next_revision_ <= 0) {
      Status s = Resync();
      if (stopping()) break;
      if (!s.ok()) {
        trouble.Failed("resync failed (retrying): " + s.ToString());
        Sleep(backoff);
        backoff = std::min(backoff * 2, kMaxBackoff);
        continue;
      }
    }
    std::string why;
    bool established = false;
    const auto began = std::chrono::steady_clock::now();
    const StreamEnd end = Stream(index, &why, &established);
    if (end == StreamEnd::kStopped) break;
    if (established) {
      // A stream that broke at once (a misbehaving server) keeps backing off.
      if (std::chrono::steady_clock::now() - began >= kMaxBackoff) backoff = kMinBackoff;
      trouble.Succeeded();
    }
    if (end == StreamEnd::kResync) {
      next_revision_ = 0;
      continue;
    }
    if (established) {
      // A stream that worked and ended (etcd restarting, or the idle read timeout): resume on the
      // same endpoint; only failing to get a stream back is worth a warning.
      FERRY_LOG(kDebug) << "etcd watch of '" << prefix_ << "': " << why << "; resuming at revision "
                        << next_revision_;
    } else {
      trouble.Failed(why + "; reconnecting");
      index = (index + 1) % n;  // try the next endpoint
    }
    Sleep(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  MutexLock lock(mu_);
  done_ = true;
  wake_.NotifyAll();
}

EtcdWatch::StreamEnd EtcdWatch::Stream(size_t index, std::string* why, bool* established) {
  const HostPort& endpoint = client_->endpoints()[index];
  auto cli = std::make_shared<httplib::Client>(endpoint.host, endpoint.port);
  cli->set_connection_timeout(client_->timeout());
  cli->set_write_timeout(client_->timeout());
  cli->set_read_timeout(std::max<std::chrono::milliseconds>(
      kMinStreamSilence, kStreamSilenceTimeouts * client_->timeout()));
  {
    MutexLock lock(mu_);
    if (stop_) return StreamEnd::kStopped;
    active_ = cli;
  }
  const json create = {{"create_request",
                        {{"key", Base64Encode(key_)},
                         {"range_end", Base64Encode(range_end_)},
                         {"start_revision", std::to_string(next_revision_)}}}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v3/watch";
  req.body = create.dump();
  req.headers.emplace("Content-Type", "application/json");
  JsonObjectStream splitter(kMaxEtcdReplyBytes);
  StreamEnd end = StreamEnd::kBroken;
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    if (stopping()) {
      end = StreamEnd::kStopped;
      return false;
    }
    Status s = splitter.Feed(std::string_view(data, size), [&](std::string_view object) {
      return OnMessage(object, endpoint, &end, why, established);
    });
    if (!s.ok() && s.code() != StatusCode::kCanceled) {
      *why = "bad watch stream from " + endpoint.ToString() + ": " + s.message();
    }
    return s.ok();
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  bool sent = false;
  const auto started = std::chrono::steady_clock::now();
  try {
    sent = cli->send(req, res, error);
  } catch (const std::exception& e) {
    *why = "watch stream from " + endpoint.ToString() + " failed: " + e.what();
  }
  {
    MutexLock lock(mu_);
    active_.reset();
    if (stop_) return StreamEnd::kStopped;
  }
  if (end != StreamEnd::kBroken) return end;
  if (why->empty()) {
    *why = sent ? "watch stream from " + endpoint.ToString() + " ended (HTTP " +
                      std::to_string(res.status) + ")"
                : "watch stream from " + endpoint.ToString() + ": " +
                      HttpRequestFailureText(error, endpoint,
                                             std::chrono::steady_clock::now() - started,
                                             client_->timeout());
  }
  return StreamEnd::kBroken;
}

bool EtcdWatch::OnMessage(std::string_view text, const HostPort& endpoint, StreamEnd* end,
                          std::string* why, bool* established) {
  const json msg = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string from = "watch message from " + endpoint.ToString();
  if (msg.is_discarded() || !msg.is_object()) {
    *why = "malformed " + from;
    return false;
  }
  if (msg.contains("error")) {
    *why = EtcdErrorStatus(msg, 200, endpoint).message();
    return false;
  }
  auto result = msg.find("result");
  if (result == msg.end() || !result->is_object()) {
    *why = from + " has no result";
    return false;
  }
  Result<int64_t> compacted = EtcdInt64Field(*result, "compact_revision");
  if (!compacted.ok()) {
    *why = from + ": " + compacted.status().message();
    return false;
  }
  if (*compacted > 0) {
    FERRY_LOG(kWarn) << "etcd watch of '" << prefix_ << "': revision " << next_revision_
                     << " was compacted (oldest kept " << *compacted << "); resyncing";
    *end = StreamEnd::kResync;
    return false;
  }
  if (auto canceled = result->find("canceled"); canceled != result->end() && *canceled == true) {
    auto reason = result->find("cancel_reason");
    *why = "etcd canceled the watch" + (reason != result->end() && reason->is_string()
                                            ? ": " + reason->get<std::string>()
                                            : std::string());
    return false;
  }
  if (auto created = result->find("created"); created != result->end() && *created == true) {
    *established = true;
  }
  auto events = result->find("events");
  if (events == result->end() || events->is_null()) return true;
  if (!events->is_array()) {
    *why = from + ": 'events' is not an array";
    return false;
  }
  // Decode the whole message before delivering any of it.
  std::vector<std::pair<WatchEvent, int64_t>> decoded;
  for (const json& ev : *events) {
    auto kv = ev.is_object() ? ev.find("kv") : ev.end();
    if (!ev.is_object() || kv == ev.end() || !kv->is_object()) {
      *why = from + ": an event without a kv";
      return false;
    }
    WatchEvent event;
    auto type = ev.find("type");
    if (type != ev.end() && (*type == "DELETE" || *type == 1)) {
      event.type = WatchEvent::Type::kDelete;
    } else if (type != ev.end() && !(*type == "PUT" || *type == 0)) {
      *why = from + ": unknown event type";
      return false;
    }
    Result<std::string> key = EtcdBytesField(*kv, "key");
    Result<std::string> value = EtcdBytesField(*kv, "value");
    Result<int64_t> revision = EtcdInt64Field(*kv, "mod_revision");
    for (const Status& s : {key.status(), value.status(), revision.status()}) {
      if (!s.ok()) {
        *why = from + ": " + s.message();
        return false;
      }
    }
    event.key = std::move(*key);
    if (event.type == WatchEvent::Type::kPut) event.value = std::move(*value);
    decoded.emplace_back(std::move(event), *revision);
  }
  *established = true;
  for (const auto& [event, revision] : decoded) {
    if (stopping()) {
      *end = StreamEnd::kStopped;
      return false;
    }
    Deliver(event);
    next_revision_ = std::max(next_revision_, revision + 1);
  }
  return true;
}

Status EtcdWatch::Resync() {
  ASSIGN_OR_RETURN(EtcdClient::RangeReply range, client_->Range(key_, range_end_));
  for (const KeyValue& kv : range.kvs) {
    if (stopping()) return CanceledError("watch stopped");
    Deliver(WatchEvent{.type = WatchEvent::Type::kPut, .key = kv.key, .value = kv.value});
  }
  next_revision_ = range.revision + 1;
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<WatchHandle>> StartEtcdWatchAt(std::shared_ptr<EtcdClient> client,
                                                      std::string_view prefix,
                                                      WatchCallback callback,
                                                      int64_t start_revision) {
  if (client == nullptr || !callback) {
    return InvalidArgumentError("etcd watch needs a client and a callback");
  }
  auto watch = std::make_unique<EtcdWatch>(std::move(client), prefix, std::move(callback),
                                           std::max<int64_t>(start_revision, 0));
  watch->Start();
  return std::unique_ptr<WatchHandle>(std::move(watch));
}

Result<std::unique_ptr<WatchHandle>> StartEtcdWatch(std::shared_ptr<EtcdClient> client,
                                                    std::string_view prefix,
                                                    WatchCallback callback) {
  if (client == nullptr) return InvalidArgumentError("etcd watch needs a client");
  int64_t start = 0;
  Result<int64_t> revision =
      client->CurrentRevision(prefix.empty() ? std::string_view("\0", 1) : prefix);
  if (revision.ok()) {
    start = *revision + 1;
  } else {
    FERRY_LOG(kWarn) << "etcd watch of '" << prefix << "': cannot read the current revision ("
                     << revision.status() << "); will resync when etcd answers";
  }
  return StartEtcdWatchAt(std::move(client), prefix, std::move(callback), start);
}

}  // namespace ferry
