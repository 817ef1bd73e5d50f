#include "metadata/etcd/etcd_store.h"

#include <algorithm>
#include <optional>
#include <string>

#include "common/log.h"
#include "common/mutex.h"
#include "core/base64.h"
#include "metadata/etcd/etcd_client.h"
#include "metadata/etcd/etcd_watch.h"
#include "metadata/lease_keeper.h"

namespace ferry {
namespace {

// "h1:p1,h2:p2", for log lines.
std::string EndpointsText(const std::vector<HostPort>& endpoints) {
  std::string text;
  for (const HostPort& e : endpoints) text += (text.empty() ? "" : ",") + e.ToString();
  return text;
}

// Thread contract: thread-safe (MetadataStore). Reads go straight to etcd; writes are serialized
// by write_mu_ with the lease's grant and rewrite, so a rewrite never resurrects a key that was
// deleted or re-put meanwhile. write_mu_ is held across etcd calls, each bounded by the timeout.
class EtcdStore final : public MetadataStore, public Watcher {
 public:
  EtcdStore(std::vector<HostPort> endpoints, const StoreOptions& options)
      : client_(std::make_shared<EtcdClient>(std::move(endpoints), options.request_timeout)),
        ttl_seconds_(std::max<int64_t>(1, (options.lease_ttl.count() + 999) / 1000)),
        keeper_(
            std::chrono::milliseconds(ttl_seconds_ * 1000 / 3),
            [this](const std::vector<KeyValue>& owned) { return RefreshLease(owned); },
            "etcd " + EndpointsText(client_->endpoints())) {}

  // Revokes the lease (bounded by the request timeout per endpoint) unless Abandon() ran.
  ~EtcdStore() override;

  std::string_view scheme() const override { return "etcd"; }
  Result<std::string> Get(std::string_view key) override;
  // A value etcd refuses as too large is InvalidArgument naming the key, the sizes and the
  // server flag that sets the limit (TooLarge).
  Status Put(std::string_view key, std::string_view value, const PutOptions& options) override;
  Status Delete(std::string_view key) override;
  Status DeleteIf(std::string_view key, std::string_view expected) override;
  Result<std::vector<KeyValue>> List(std::string_view prefix) override;
  Watcher* watcher() override { return this; }
  bool TakenOver(std::string_view key) const override { return keeper_.WasTakenOver(key); }
  Result<std::unique_ptr<WatchHandle>> Watch(std::string_view prefix,
                                             WatchCallback callback) override;
  void Abandon() override;

 private:
  // The store's lease, granted now if there is none (then the keeper starts, and keys owned under
  // a lost lease are marked for rewriting).
  Result<int64_t> EnsureLeaseLocked() REQUIRES(write_mu_);
  // Puts `value` under `key` only while the key is absent or holds `replaces` (etcd
  // transactions comparing the value, then, for an absent key, its create revision).
  // kAlreadyExists when it holds another value; kNotFound when etcd lost `lease`.
  Status PutIfLocked(std::string_view key, std::string_view value, std::string_view replaces,
                     int64_t lease) REQUIRES(write_mu_);
  // Puts every owned key again with the current lease, unless another writer holds it now.
  Status RewriteOwnedLocked() REQUIRES(write_mu_);
  // One transaction checking that every owned key still holds its value; a key another writer
  // holds is given up (LeaseKeeper::TakenOver), a key that is gone is written again.
  Status CheckOwnedLocked(const std::vector<KeyValue>& owned) REQUIRES(write_mu_);
  // The keeper's round: keep-alive, or re-grant and rewrite when etcd lost the lease.
  Status RefreshLease(const std::vector<KeyValue>& owned);

  const std::shared_ptr<EtcdClient> client_;  // shared with the watches, which may outlive us
  const int64_t ttl_seconds_;
  Mutex write_mu_;
  int64_t lease_id_ GUARDED_BY(write_mu_) = 0;          // 0: none granted (or known lost)
  bool rewrite_pending_ GUARDED_BY(write_mu_) = false;  // owned keys still need the new lease
  bool abandoned_ GUARDED_BY(write_mu_) = false;
  // Set before keeper_.Stop() (Abandon, destructor): the keeper is never started again, and a
  // refresh round in flight cannot block on keeper_.Start() while Stop() joins it.
  bool closing_ GUARDED_BY(write_mu_) = false;
  LeaseKeeper keeper_;  // last: its thread stops before the members it uses go away
};

Status CheckKey(std::string_view key) {
  return key.empty() ? InvalidArgumentError("etcd keys may not be empty") : Status::Ok();
}

// ---- transactions (POST /v3/kv/txn) ----

nlohmann::json ValueEquals(std::string_view key, std::string_view value) {
  return {{"key", Base64Encode(key)},
          {"target", "VALUE"},
          {"result", "EQUAL"},
          {"value", Base64Encode(value)}};
}

nlohmann::json Absent(std::string_view key) {
  return {{"key", Base64Encode(key)},
          {"target", "CREATE"},
          {"result", "EQUAL"},
          {"create_revision", "0"}};
}

nlohmann::json PutOp(std::string_view key, std::string_view value, int64_t lease) {
  nlohmann::json put = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return {{"request_put", std::move(put)}};
}

nlohmann::json RangeOp(std::string_view key) {
  return {{"request_range", {{"key", Base64Encode(key)}}}};
}

struct TxnReply {
  bool succeeded = false;
  // On failure: the value each failure range found, in order (nullopt: the key is absent).
  std::vector<std::optional<std::string>> current;
};

// Runs `compare` -> `success` | a range of each of `keys`.
Result<TxnReply> Txn(EtcdClient& client, nlohmann::json compare, nlohmann::json success,
                     const std::vector<std::string_view>& keys) {
  nlohmann::json failure = nlohmann::json::array();
  for (std::string_view key : keys) failure.push_back(RangeOp(key));
  ASSIGN_OR_RETURN(nlohmann::json reply,
                   client.Call("/v3/kv/txn", {{"compare", std::move(compare)},
                                              {"success", std::move(success)},
                                              {"failure", std::move(failure)}}));
  TxnReply out;
  if (auto it = reply.find("succeeded"); it != reply.end() && !it->is_null()) {
    if (!it->is_boolean()) return InternalError("etcd txn reply: 'succeeded' is not a boolean");
    out.succeeded = it->get<bool>();
  }
  if (out.succeeded) return out;
  auto responses = reply.find("responses");
  if (responses == reply.end() || !responses->is_array() || responses->size() != keys.size()) {
    return InternalError("etcd txn reply: expected " + std::to_string(keys.size()) +
                         " range responses");
  }
  for (const nlohmann::json& response : *responses) {
    auto range = response.is_object() ? response.find("response_range") : response.end();
    if (range == response.end() || !range->is_object()) {
      return InternalError("etcd txn reply: a failure response is not a range");
    }
    auto kvs = range->find("kvs");
    if (kvs == range->end() || kvs->is_null() || (kvs->is_array() && kvs->empty())) {
      out.current.emplace_back(std::nullopt);
      continue;
    }
    if (!kvs->is_array() || !kvs->front().is_object()) {
      return InternalError("etcd txn reply: 'kvs' is not an array of objects");
    }
    ASSIGN_OR_RETURN(std::string value, EtcdBytesField(kvs->front(), "value"));
    out.current.emplace_back(std::move(value));
  }
  return out;
}

Status HeldByAnother(std::string_view key, std::string_view what) {
  return AlreadyExistsError("etcd key '" + std::string(key) +
                            "' holds another writer's value; " + std::string(what));
}

EtcdStore::~EtcdStore() {
  {
    MutexLock lock(write_mu_);
    closing_ = true;
  }
  keeper_.Stop();
  MutexLock lock(write_mu_);
  if (abandoned_) return;
  keeper_.TakeAll();
  if (lease_id_ == 0) return;
  if (Status s = client_->LeaseRevoke(lease_id_); !s.ok()) {
    FERRY_LOG(kWarn) << "could not revoke etcd lease " << lease_id_ << " (its keys expire within "
                     << ttl_seconds_ << " s): " << s;
  }
}

Result<std::string> EtcdStore::Get(std::string_view key) {
  RETURN_IF_ERROR(CheckKey(key));
  ASSIGN_OR_RETURN(EtcdClient::RangeReply range, client_->Range(key, {}));
  for (KeyValue& kv : range.kvs) {
    if (kv.key == key) return std::move(kv.value);
  }
  return NotFoundError("etcd has no key '" + std::string(key) + "'");
}

namespace {

// etcd refuses a request over its --max-request-bytes (1.5 MiB unless raised on the server;
// gRPC's message cap is that plus 512 KiB) with "request is too large" or, past the gRPC cap,
// "... larger than max ...". A descriptor is never split over several keys (the key layout is
// Mooncake's, whose tools read it whole): the error says which limit was hit and what to do.
Status TooLarge(const Status& s, std::string_view key, std::string_view value,
                const PutOptions& options) {
  if (s.code() != StatusCode::kInvalidArgument ||
      (s.message().find("larger than max") == std::string::npos &&
       s.message().find("request is too large") == std::string::npos)) {
    return s;
  }
  std::string what =
      "writing '" + std::string(key) + "' (" + std::to_string(value.size()) + " bytes";
  if (options.replaces.has_value() && !options.replaces->empty()) {
    what += ", plus the " + std::to_string(options.replaces->size()) +
            " bytes it replaces, which the conditional write compares";
  }
  return s.WithContext(what +
                       "): etcd refuses requests over its --max-request-bytes (1.5 MiB "
                       "unless the etcd server raises it); raise that flag on every etcd "
                       "member, or register fewer buffers in this segment");
}

}  // namespace

Status EtcdStore::Put(std::string_view key, std::string_view value, const PutOptions& options) {
  RETURN_IF_ERROR(CheckKey(key));
  MutexLock lock(write_mu_);
  if (!options.leased) {
    RETURN_IF_ERROR(TooLarge(options.replaces.has_value()
                                 ? PutIfLocked(key, value, *options.replaces, 0)
                                 : client_->Put(key, value, 0),
                             key, value, options));
    keeper_.Forget(key);
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(int64_t lease, EnsureLeaseLocked());
  Status s = options.replaces.has_value() ? PutIfLocked(key, value, *options.replaces, lease)
                                          : client_->Put(key, value, lease);
  if (s.code() == StatusCode::kNotFound) {
    // etcd lost the lease (expired during an outage, or revoked): grant another and retry once.
    FERRY_LOG(kWarn) << "etcd lease " << lease << " is gone; granting a new one";
    lease_id_ = 0;
    ASSIGN_OR_RETURN(lease, EnsureLeaseLocked());
    s = options.replaces.has_value() ? PutIfLocked(key, value, *options.replaces, lease)
                                     : client_->Put(key, value, lease);
  }
  RETURN_IF_ERROR(TooLarge(s, key, value, options));
  keeper_.Track(key, value);
  return Status::Ok();
}

Status EtcdStore::Delete(std::string_view key) {
  RETURN_IF_ERROR(CheckKey(key));
  MutexLock lock(write_mu_);
  RETURN_IF_ERROR(client_->Delete(key));
  keeper_.Forget(key);
  return Status::Ok();
}

Status EtcdStore::DeleteIf(std::string_view key, std::string_view expected) {
  RETURN_IF_ERROR(CheckKey(key));
  MutexLock lock(write_mu_);
  keeper_.Forget(key);
  const nlohmann::json remove = {{"request_delete_range", {{"key", Base64Encode(key)}}}};
  ASSIGN_OR_RETURN(TxnReply reply,
                   Txn(*client_, nlohmann::json::array({ValueEquals(key, expected)}),
                       nlohmann::json::array({remove}), {key}));
  if (reply.succeeded) return Status::Ok();
  if (!reply.current.front().has_value()) {
    return NotFoundError("etcd has no key '" + std::string(key) + "'");
  }
  return HeldByAnother(key, "not deleted");
}

Status EtcdStore::PutIfLocked(std::string_view key, std::string_view value,
                              std::string_view replaces, int64_t lease) {
  // etcd compares are ANDed, and a VALUE compare on an absent key fails: "holds `replaces`"
  // and "is absent" are two transactions. Between them the key may appear; the second
  // transaction then fails and nothing is written.
  ASSIGN_OR_RETURN(TxnReply same, Txn(*client_, nlohmann::json::array({ValueEquals(key, replaces)}),
                                      nlohmann::json::array({PutOp(key, value, lease)}), {key}));
  if (same.succeeded) return Status::Ok();
  if (same.current.front().has_value()) return HeldByAnother(key, "not replaced");
  ASSIGN_OR_RETURN(TxnReply absent, Txn(*client_, nlohmann::json::array({Absent(key)}),
                                        nlohmann::json::array({PutOp(key, value, lease)}), {key}));
  if (absent.succeeded) return Status::Ok();
  return HeldByAnother(key, "not replaced");
}

Result<std::vector<KeyValue>> EtcdStore::List(std::string_view prefix) {
  const std::string key = prefix.empty() ? std::string(1, '\0') : std::string(prefix);
  ASSIGN_OR_RETURN(EtcdClient::RangeReply range, client_->Range(key, EtcdPrefixEnd(prefix)));
  return std::move(range.kvs);
}

Result<std::unique_ptr<WatchHandle>> EtcdStore::Watch(std::string_view prefix,
                                                      WatchCallback callback) {
  if (!callback) return InvalidArgumentError("etcd watch needs a callback");
  return StartEtcdWatch(client_, prefix, std::move(callback));
}

void EtcdStore::Abandon() {
  {
    MutexLock lock(write_mu_);
    abandoned_ = true;
    closing_ = true;
  }
  keeper_.Stop();
  keeper_.TakeAll();
}

Result<int64_t> EtcdStore::EnsureLeaseLocked() {
  if (lease_id_ != 0) return lease_id_;
  ASSIGN_OR_RETURN(EtcdClient::Lease lease, client_->LeaseGrant(ttl_seconds_));
  lease_id_ = lease.id;
  if (!keeper_.Owned().empty()) {
    rewrite_pending_ = true;  // keys put under the lost lease are gone with it
    keeper_.RefreshSoon();
  }
  if (!closing_) keeper_.Start();
  return lease_id_;
}

Status EtcdStore::RewriteOwnedLocked() {
  const std::vector<KeyValue> owned = keeper_.Owned();
  size_t rewritten = 0;
  for (const KeyValue& kv : owned) {
    Status s = PutIfLocked(kv.key, kv.value, kv.value, lease_id_);
    if (s.code() == StatusCode::kAlreadyExists) {
      keeper_.TakenOver(kv.key, kv.value, "etcd");
      continue;
    }
    if (s.code() == StatusCode::kNotFound) lease_id_ = 0;  // lost again: re-grant next round
    RETURN_IF_ERROR(s.WithContext("rewriting leased key '" + kv.key + "'"));
    ++rewritten;
  }
  rewrite_pending_ = false;
  if (rewritten > 0) {
    FERRY_LOG(kInfo) << "rewrote " << rewritten << " leased keys under etcd lease " << lease_id_;
  }
  return Status::Ok();
}

Status EtcdStore::CheckOwnedLocked(const std::vector<KeyValue>& owned) {
  constexpr size_t kPerTxn = 64;  // etcd's default --max-txn-ops is 128
  for (size_t begin = 0; begin < owned.size(); begin += kPerTxn) {
    const size_t end = std::min(owned.size(), begin + kPerTxn);
    nlohmann::json compare = nlohmann::json::array();
    std::vector<std::string_view> keys;
    for (size_t i = begin; i < end; ++i) {
      compare.push_back(ValueEquals(owned[i].key, owned[i].value));
      keys.push_back(owned[i].key);
    }
    ASSIGN_OR_RETURN(TxnReply reply,
                     Txn(*client_, std::move(compare), nlohmann::json::array(), keys));
    if (reply.succeeded) continue;
    for (size_t i = begin; i < end; ++i) {
      const KeyValue& kv = owned[i];
      const std::optional<std::string>& current = reply.current[i - begin];
      if (current.has_value() && *current == kv.value) continue;
      if (!keeper_.Owns(kv.key)) continue;  // deleted since the round began
      // Gone (deleted by someone else): written again, unless another writer got there first.
      Status s = current.has_value() ? HeldByAnother(kv.key, "")
                                     : PutIfLocked(kv.key, kv.value, kv.value, lease_id_);
      if (s.code() == StatusCode::kAlreadyExists) {
        keeper_.TakenOver(kv.key, kv.value, "etcd");
        continue;
      }
      if (s.code() == StatusCode::kNotFound) lease_id_ = 0;
      RETURN_IF_ERROR(s.WithContext("rewriting leased key '" + kv.key + "'"));
      FERRY_LOG(kInfo) << "etcd: rewrote leased key '" << kv.key << "', which was gone";
    }
  }
  return Status::Ok();
}

Status EtcdStore::RefreshLease(const std::vector<KeyValue>& owned) {
  if (owned.empty()) return Status::Ok();
  int64_t lease = 0;
  {
    MutexLock lock(write_mu_);
    if (closing_) return Status::Ok();
    if (lease_id_ != 0 && !rewrite_pending_) lease = lease_id_;
  }
  if (lease != 0) {
    ASSIGN_OR_RETURN(int64_t ttl, client_->LeaseKeepAlive(lease));
    if (ttl > 0) {
      // The lease lives; its keys may still have been replaced or deleted by others.
      MutexLock lock(write_mu_);
      if (closing_ || lease_id_ != lease) return Status::Ok();
      return CheckOwnedLocked(keeper_.Owned());
    }
    FERRY_LOG(kWarn) << "etcd lease " << lease << " is gone (expired or etcd lost it); granting "
                     << "a new one and rewriting " << owned.size() << " keys";
  }
  MutexLock lock(write_mu_);
  if (closing_) return Status::Ok();
  if (lease != 0 && lease_id_ == lease) lease_id_ = 0;
  if (lease_id_ == 0) {
    ASSIGN_OR_RETURN(int64_t granted, EnsureLeaseLocked());
    (void)granted;
    rewrite_pending_ = true;
  }
  return rewrite_pending_ ? RewriteOwnedLocked() : Status::Ok();
}

}  // namespace

Result<std::unique_ptr<MetadataStore>> CreateEtcdStore(const std::vector<HostPort>& endpoints,
                                                       const StoreOptions& options) {
  if (endpoints.empty()) return InvalidArgumentError("etcd store needs at least one endpoint");
  if (options.request_timeout.count() <= 0 || options.lease_ttl.count() <= 0) {
    return InvalidArgumentError("etcd store needs a positive request_timeout and lease_ttl");
  }
  return std::unique_ptr<MetadataStore>(new EtcdStore(endpoints, options));
}

}  // namespace ferry
