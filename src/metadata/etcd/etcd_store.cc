#include "metadata/etcd/etcd_store.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "common/process_shared.h"
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

class EtcdStore;

// One etcd lease per process and cluster (endpoints, request timeout and TTL): the leased keys of
// every EtcdStore of the process go on it, and one keeper thread keeps it alive for all of them,
// every TTL/3: one keep-alive, then one transaction per 64 owned keys (of all its stores) checking
// that they still hold their values. A thousand engines in a process cost etcd one lease and a
// few requests a round, instead of a lease and two requests per engine and round.
// When etcd reports the lease gone, a new one is granted and each store writes its keys again
// under it. A store's Abandon (a crash, for tests and fast exits) must not leave its keys alive
// on a lease the others keep: the lease is dropped unrevoked (its keys expire within the TTL)
// and the other stores' keys are written again under a new one at once. The last store to close
// cleanly revokes it.
//
// Thread contract: thread-safe. The keeper's round calls into member stores (RefreshRound,
// Repair) holding round_mu_; Leave waits for a round in progress, so no round touches a store
// after it left. Lock order: round_mu_, then a store's write_mu_, then mu_.
class ProcessLease {
 public:
  ProcessLease(std::vector<HostPort> endpoints, std::chrono::milliseconds timeout,
               int64_t ttl_seconds);
  ~ProcessLease();
  ProcessLease(const ProcessLease&) = delete;
  ProcessLease& operator=(const ProcessLease&) = delete;

  // The process's lease for these endpoints and options, made when none is alive.
  static std::shared_ptr<ProcessLease> For(const std::vector<HostPort>& endpoints,
                                           const StoreOptions& options, int64_t ttl_seconds);

  const std::shared_ptr<EtcdClient>& client() const { return client_; }
  int64_t ttl_seconds() const { return ttl_seconds_; }

  void Join(EtcdStore* store);
  // Removes `store` (waits for a round in progress; a no-op once it left). When it was the last
  // member, the lease is forgotten (the next member gets another) and, with `revoke`, revoked
  // (deleting whatever keys are on it); otherwise it expires. When others remain and `abandon`,
  // the lease is dropped unrevoked and the others' keys move to a new one (see above).
  // Returns whether it revoked the lease (or tried: etcd could not be asked, and the keys on it
  // expire).
  bool Leave(EtcdStore* store, bool revoke, bool abandon);
  // The lease, granted now if there is none.
  Result<int64_t> Ensure();
  // etcd reported `lease` gone: the next Ensure grants another (and a round comes soon).
  void Lost(int64_t lease);
  // Runs a round now instead of at the next interval.
  void RefreshSoon() { keeper_.RefreshSoon(); }

 private:
  Status Round();

  const std::shared_ptr<EtcdClient> client_;  // shared with the stores' watches
  const int64_t ttl_seconds_;
  Mutex round_mu_;  // held across a round
  Mutex mu_;
  int64_t lease_id_ GUARDED_BY(mu_) = 0;  // 0: none granted (or known lost, or dropped)
  std::vector<EtcdStore*> members_ GUARDED_BY(mu_);
  // Last: its thread stops first. Only its thread and timing are used; the keys are the stores'.
  LeaseKeeper keeper_;
};

// Thread contract: thread-safe (MetadataStore). Reads go straight to etcd; writes are serialized
// by write_mu_ with the rewrites and repairs of the process lease's rounds, so a rewrite never
// resurrects a key that was deleted or re-put meanwhile. write_mu_ is held across etcd calls,
// each bounded by the timeout.
class EtcdStore final : public MetadataStore, public Watcher {
 public:
  EtcdStore(const std::vector<HostPort>& endpoints, const StoreOptions& options)
      : lease_share_(ProcessLease::For(
            endpoints, options, std::max<int64_t>(1, (options.lease_ttl.count() + 999) / 1000))),
        client_(lease_share_->client()) {
    lease_share_->Join(this);
  }

  // Deletes the keys it still owns (the process's last store revokes the lease instead), bounded
  // by the request timeout per endpoint, unless Abandon() ran.
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
  bool TakenOver(std::string_view key) const override { return keys_.WasTakenOver(key); }
  Result<std::unique_ptr<WatchHandle>> Watch(std::string_view prefix,
                                             WatchCallback callback) override;
  void Abandon() override;

  // ---- called by ProcessLease's round (holding its round_mu_) ----
  bool HasKeys() const { return !keys_.empty(); }
  // Keys not yet written under `lease` are written again now; the others are appended to
  // `check`, for the round's batched check.
  Status RefreshRound(int64_t lease, std::vector<std::pair<EtcdStore*, KeyValue>>* check)
      EXCLUDES(write_mu_);
  // The check found `kv` not holding its value (`current`: what it holds; nullopt: absent):
  // written again when gone, given up when another writer holds it.
  Status Repair(const KeyValue& kv, const std::optional<std::string>& current, int64_t lease)
      EXCLUDES(write_mu_);

 private:
  // Puts `value` under `key` only while the key is absent or holds `replaces` (etcd
  // transactions comparing the value, then, for an absent key, its create revision).
  // kAlreadyExists when it holds another value; kNotFound when etcd lost `lease`.
  Status PutIfLocked(std::string_view key, std::string_view value, std::string_view replaces,
                     int64_t lease) REQUIRES(write_mu_);
  // Puts every owned key again under `lease`, unless another writer holds it now.
  Status RewriteOwnedLocked(int64_t lease) REQUIRES(write_mu_);

  const std::shared_ptr<ProcessLease> lease_share_;
  const std::shared_ptr<EtcdClient> client_;  // the lease's; shared with the watches
  Mutex write_mu_;
  int64_t lease_ GUARDED_BY(write_mu_) = 0;  // the lease the owned keys were written under
  bool rewrite_pending_ GUARDED_BY(write_mu_) = false;  // some owned keys are on an older lease
  bool abandoned_ GUARDED_BY(write_mu_) = false;
  bool closing_ GUARDED_BY(write_mu_) = false;  // Abandon or the destructor began
  LeasedKeys keys_;
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
  return AlreadyExistsError("etcd key '" + std::string(key) + "' holds another writer's value; " +
                            std::string(what));
}

EtcdStore::~EtcdStore() {
  bool abandoned = false;
  {
    MutexLock lock(write_mu_);
    closing_ = true;
    abandoned = abandoned_;
  }
  // What is left is deleted here (or by the last store's revoke), each key only while it holds
  // this store's value; no round touches the keys once Leave returns.
  std::vector<KeyValue> owned;
  if (!abandoned) owned = keys_.TakeAll();
  if (lease_share_->Leave(this, /*revoke=*/!abandoned, /*abandon=*/abandoned)) return;
  for (const KeyValue& kv : owned) {
    Status s = DeleteIf(kv.key, kv.value);
    if (!s.ok() && s.code() != StatusCode::kNotFound && s.code() != StatusCode::kAlreadyExists) {
      FERRY_LOG(kWarn) << "could not delete " << owned.size() << " leased etcd keys, from '"
                       << kv.key << "' on (they expire within " << lease_share_->ttl_seconds()
                       << " s of this process's exit): " << s;
      break;  // one bounded attempt when etcd cannot be asked, not one per key
    }
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
    keys_.Forget(key);
    return Status::Ok();
  }
  // An abandoned store has left the process lease, which others may keep alive: its keys must
  // not go on it.
  if (abandoned_) return BusyError("etcd store was abandoned: no leased writes after Abandon()");
  ASSIGN_OR_RETURN(int64_t lease, lease_share_->Ensure());
  Status s = options.replaces.has_value() ? PutIfLocked(key, value, *options.replaces, lease)
                                          : client_->Put(key, value, lease);
  if (s.code() == StatusCode::kNotFound) {
    // etcd lost the lease (expired during an outage, or revoked): grant another and retry once.
    FERRY_LOG(kWarn) << "etcd lease " << lease << " is gone; granting a new one";
    lease_share_->Lost(lease);
    ASSIGN_OR_RETURN(lease, lease_share_->Ensure());
    s = options.replaces.has_value() ? PutIfLocked(key, value, *options.replaces, lease)
                                     : client_->Put(key, value, lease);
  }
  RETURN_IF_ERROR(TooLarge(s, key, value, options));
  if (lease != lease_) {
    // Other owned keys are on an older lease (lost, or dropped for an abandoned store): the next
    // round writes them again under this one, and comes at once.
    if (!keys_.empty()) {
      rewrite_pending_ = true;
      lease_share_->RefreshSoon();
    }
    lease_ = lease;
  }
  keys_.Track(key, value);
  return Status::Ok();
}

Status EtcdStore::Delete(std::string_view key) {
  RETURN_IF_ERROR(CheckKey(key));
  MutexLock lock(write_mu_);
  RETURN_IF_ERROR(client_->Delete(key));
  keys_.Forget(key);
  return Status::Ok();
}

Status EtcdStore::DeleteIf(std::string_view key, std::string_view expected) {
  RETURN_IF_ERROR(CheckKey(key));
  MutexLock lock(write_mu_);
  keys_.Forget(key);
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
    if (abandoned_) return;
    abandoned_ = true;
    closing_ = true;
  }
  keys_.TakeAll();
  lease_share_->Leave(this, /*revoke=*/false, /*abandon=*/true);
}

Status EtcdStore::RewriteOwnedLocked(int64_t lease) {
  const std::vector<KeyValue> owned = keys_.Owned();
  size_t rewritten = 0;
  for (const KeyValue& kv : owned) {
    Status s = PutIfLocked(kv.key, kv.value, kv.value, lease);
    if (s.code() == StatusCode::kAlreadyExists) {
      keys_.TakenOver(kv.key, kv.value, "etcd");
      continue;
    }
    if (s.code() == StatusCode::kNotFound) lease_share_->Lost(lease);  // re-granted next round
    RETURN_IF_ERROR(s.WithContext("rewriting leased key '" + kv.key + "'"));
    ++rewritten;
  }
  lease_ = lease;
  rewrite_pending_ = false;
  if (rewritten > 0) {
    FERRY_LOG(kInfo) << "rewrote " << rewritten << " leased keys under etcd lease " << lease;
  }
  return Status::Ok();
}

Status EtcdStore::RefreshRound(int64_t lease, std::vector<std::pair<EtcdStore*, KeyValue>>* check) {
  MutexLock lock(write_mu_);
  if (closing_ || keys_.empty()) return Status::Ok();
  if (lease_ != lease || rewrite_pending_) {
    if (lease_ != 0 && lease_ != lease) {
      FERRY_LOG(kInfo) << "etcd lease " << lease_ << " is gone (expired, lost by etcd, or "
                       << "dropped for an abandoned store of this process); rewriting the "
                       << "leased keys under lease " << lease;
    }
    return RewriteOwnedLocked(lease);
  }
  for (KeyValue& kv : keys_.Owned()) check->emplace_back(this, std::move(kv));
  return Status::Ok();
}

Status EtcdStore::Repair(const KeyValue& kv, const std::optional<std::string>& current,
                         int64_t lease) {
  MutexLock lock(write_mu_);
  // Deleted, re-put or moved to another lease since the round began: nothing to repair.
  if (closing_ || lease_ != lease || !keys_.OwnsWith(kv.key, kv.value)) return Status::Ok();
  // Gone (deleted by someone else): written again, unless another writer got there first.
  Status s = current.has_value() ? HeldByAnother(kv.key, "")
                                 : PutIfLocked(kv.key, kv.value, kv.value, lease);
  if (s.code() == StatusCode::kAlreadyExists) {
    keys_.TakenOver(kv.key, kv.value, "etcd");
    return Status::Ok();
  }
  if (s.code() == StatusCode::kNotFound) lease_share_->Lost(lease);
  RETURN_IF_ERROR(s.WithContext("rewriting leased key '" + kv.key + "'"));
  FERRY_LOG(kInfo) << "etcd: rewrote leased key '" << kv.key << "', which was gone";
  return Status::Ok();
}

// ---- ProcessLease ----

ProcessLease::ProcessLease(std::vector<HostPort> endpoints, std::chrono::milliseconds timeout,
                           int64_t ttl_seconds)
    : client_(std::make_shared<EtcdClient>(std::move(endpoints), timeout)),
      ttl_seconds_(ttl_seconds),
      keeper_(
          std::chrono::milliseconds(ttl_seconds * 1000 / 3),
          [this](const std::vector<KeyValue>&) { return Round(); },
          "etcd " + EndpointsText(client_->endpoints())) {
  keeper_.Start();
}

ProcessLease::~ProcessLease() { keeper_.Stop(); }

std::shared_ptr<ProcessLease> ProcessLease::For(const std::vector<HostPort>& endpoints,
                                                const StoreOptions& options, int64_t ttl_seconds) {
  static auto* leases = new ProcessShared<ProcessLease>();  // never destroyed
  return leases->Get(
      EndpointsText(endpoints) + '\n' + std::to_string(options.request_timeout.count()) + '\n' +
          std::to_string(ttl_seconds),
      [&] {
        return std::make_shared<ProcessLease>(endpoints, options.request_timeout, ttl_seconds);
      });
}

void ProcessLease::Join(EtcdStore* store) {
  MutexLock lock(mu_);
  members_.push_back(store);
}

bool ProcessLease::Leave(EtcdStore* store, bool revoke, bool abandon) {
  int64_t revoking = 0;
  bool moving = false;
  {
    MutexLock round(round_mu_);
    MutexLock lock(mu_);
    const auto it = std::find(members_.begin(), members_.end(), store);
    if (it == members_.end()) return false;
    members_.erase(it);
    if (members_.empty()) {
      if (revoke) revoking = lease_id_;
      lease_id_ = 0;  // the next store of the process gets a lease of its own
    } else if (abandon && lease_id_ != 0) {
      lease_id_ = 0;  // dropped unrevoked: the abandoned keys expire, the others' move
      moving = true;
    }
  }
  if (moving) keeper_.RefreshSoon();
  if (revoking == 0) return false;
  if (Status s = client_->LeaseRevoke(revoking); !s.ok()) {
    FERRY_LOG(kWarn) << "could not revoke etcd lease " << revoking << " (its keys expire within "
                     << ttl_seconds_ << " s): " << s;
  }
  return true;
}

Result<int64_t> ProcessLease::Ensure() {
  MutexLock lock(mu_);
  if (lease_id_ != 0) return lease_id_;
  ASSIGN_OR_RETURN(EtcdClient::Lease lease, client_->LeaseGrant(ttl_seconds_));
  lease_id_ = lease.id;
  return lease_id_;
}

void ProcessLease::Lost(int64_t lease) {
  {
    MutexLock lock(mu_);
    if (lease_id_ != lease) return;
    lease_id_ = 0;
  }
  keeper_.RefreshSoon();
}

Status ProcessLease::Round() {
  MutexLock round(round_mu_);
  std::vector<EtcdStore*> members;
  int64_t lease = 0;
  {
    MutexLock lock(mu_);
    members = members_;
    lease = lease_id_;
  }
  if (std::none_of(members.begin(), members.end(), [](EtcdStore* m) { return m->HasKeys(); })) {
    return Status::Ok();
  }
  if (lease != 0) {
    ASSIGN_OR_RETURN(int64_t ttl, client_->LeaseKeepAlive(lease));
    if (ttl <= 0) {
      FERRY_LOG(kWarn) << "etcd lease " << lease << " is gone (expired or etcd lost it); "
                       << "granting a new one";
      Lost(lease);
      lease = 0;
    }
  }
  if (lease == 0) {
    ASSIGN_OR_RETURN(lease, Ensure());
  }
  // Stores whose keys are not on this lease write them again; the others' keys are checked.
  std::vector<std::pair<EtcdStore*, KeyValue>> check;
  Status first;
  for (EtcdStore* m : members) {
    Status s = m->RefreshRound(lease, &check);
    if (first.ok() && !s.ok()) first = s;
  }
  constexpr size_t kPerTxn = 64;  // etcd's default --max-txn-ops is 128
  for (size_t begin = 0; begin < check.size(); begin += kPerTxn) {
    const size_t end = std::min(check.size(), begin + kPerTxn);
    nlohmann::json compare = nlohmann::json::array();
    std::vector<std::string_view> keys;
    for (size_t i = begin; i < end; ++i) {
      compare.push_back(ValueEquals(check[i].second.key, check[i].second.value));
      keys.push_back(check[i].second.key);
    }
    ASSIGN_OR_RETURN(TxnReply reply,
                     Txn(*client_, std::move(compare), nlohmann::json::array(), keys));
    if (reply.succeeded) continue;
    for (size_t i = begin; i < end; ++i) {
      const KeyValue& kv = check[i].second;
      const std::optional<std::string>& current = reply.current[i - begin];
      if (current.has_value() && *current == kv.value) continue;
      Status s = check[i].first->Repair(kv, current, lease);
      if (first.ok() && !s.ok()) first = s;
    }
  }
  return first;
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
