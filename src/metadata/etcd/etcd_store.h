// etcd://h:p[,h2:p2,...]: a MetadataStore on etcd 3.4's v3 JSON gateway (plain HTTP).
//
// Endpoints fail over: a call that cannot reach one endpoint (or times out there) goes to the
// next, and the next call starts at the one that answered. Leased keys share one etcd lease per
// store client (TTL = lease_ttl rounded up to whole seconds, at least 1; etcd may raise it to its
// minimum), granted at the first leased Put and kept alive every TTL/3; when etcd reports the
// lease gone (expired during an outage, or revoked), a new lease is granted and every owned key is
// written again with it. Each keep-alive round also checks, in one transaction, that the owned
// keys still hold this client's values: one deleted meanwhile is written again, one another
// writer holds is given up. Conditional writes (PutOptions::replaces, DeleteIf) are
// transactions comparing the value. Destroying the store revokes the lease, deleting its keys
// (a key another client took over is on that client's lease), unless Abandon() ran. watcher() is non-null: watches stream /v3/watch and survive etcd restarts.
// StoreOptions::clock is not used: every wait here is a network timeout.
#pragma once

#include <memory>
#include <vector>

#include "common/host_port.h"
#include "ferry/status.h"
#include "metadata/metadata_store.h"

namespace ferry {

// Creates a client for the etcd cluster at `endpoints` without contacting it (the first call
// reports kUnavailable if nothing answers). Errors: InvalidArgument for no endpoints or a
// non-positive request_timeout / lease_ttl.
Result<std::unique_ptr<MetadataStore>> CreateEtcdStore(const std::vector<HostPort>& endpoints,
                                                       const StoreOptions& options);

}  // namespace ferry
