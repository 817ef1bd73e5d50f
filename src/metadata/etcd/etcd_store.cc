#include "metadata/etcd/etcd_store.h"

#include <algorithm>
#include <string>

#include "common/log.h"
#include "common/mutex.h"
#include "metadata/etcd/etcd_client.h"
#include "metadata/etcd/etcd_watch.h"
#include "metadata/lease_keeper.h"

namespace ferry {
namespace {

// Thread contract: thread-safe (MetadataStore). Reads go straight to etcd; writes are serialized
// by write_mu_ with the lease's grant and rewrite, so a rewrite never resurrects a key that was
// deleted or re-put meanwhile. write_mu_ is held across etcd calls, each bounded by the timeout.
class EtcdStore final : public MetadataStore, public Watcher {
 public:
  EtcdStore(std::vector<HostPort> endpoints, const StoreOptions& options)
      : client_(std::make_shared<EtcdClient>(std::move(endpoints), options.request_timeout)),
        ttl_seconds_(std::max<int64_t>(1, (options.lease_ttl.count() + 999) / 1000)),
        keeper_(std::chrono::milliseconds(ttl_seconds_ * 1000 / 3),
                [this](const std::vector<KeyValue>& owned) { return RefreshLease(owned); }) {}

  // Revokes the lease (bounded by the request timeout per endpoint) unless Abandon() ran.
  ~EtcdStore() override;

  std::string_view scheme() const override { return "etcd"; }
  Result<std::string> Get(std::string_view key) override;
  Status Put(std::string_view key, std::string_view value, const PutOptions& options) override;
  Status Delete(std::string_view key) override;
  Result<std::vector<KeyValue>> List(std::string_view prefix) override;
  Watcher* watcher() override { return this; }
  Result<std::unique_ptr<WatchHandle>> Watch(std::string_view prefix,
                                             WatchCallback callback) override;
  void Abandon() override;

 private:
  // The store's lease, granted now if there is none (then the keeper starts, and keys owned under
  // a lost lease are marked for rewriting).
  Result<int64_t> EnsureLeaseLocked() REQUIRES(write_mu_);
  // Puts every owned key again with the current lease.
  Status RewriteOwnedLocked() REQUIRES(write_mu_);
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

Status EtcdStore::Put(std::string_view key, std::string_view value, const PutOptions& options) {
  RETURN_IF_ERROR(CheckKey(key));
  MutexLock lock(write_mu_);
  if (!options.leased) {
    RETURN_IF_ERROR(client_->Put(key, value, 0));
    keeper_.Forget(key);
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(int64_t lease, EnsureLeaseLocked());
  Status s = client_->Put(key, value, lease);
  if (s.code() == StatusCode::kNotFound) {
    // etcd lost the lease (expired during an outage, or revoked): grant another and retry once.
    FERRY_LOG(kWarn) << "etcd lease " << lease << " is gone; granting a new one";
    lease_id_ = 0;
    ASSIGN_OR_RETURN(lease, EnsureLeaseLocked());
    s = client_->Put(key, value, lease);
  }
  RETURN_IF_ERROR(s);
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
  for (const KeyValue& kv : owned) {
    Status s = client_->Put(kv.key, kv.value, lease_id_);
    if (s.code() == StatusCode::kNotFound) lease_id_ = 0;  // lost again: re-grant next round
    RETURN_IF_ERROR(s.WithContext("rewriting leased key '" + kv.key + "'"));
  }
  rewrite_pending_ = false;
  if (!owned.empty()) {
    FERRY_LOG(kInfo) << "rewrote " << owned.size() << " leased keys under etcd lease " << lease_id_;
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
    if (ttl > 0) return Status::Ok();
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
