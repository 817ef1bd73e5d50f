// etcd://h:p[,h2:p2,...]: a MetadataStore on etcd 3.4's v3 JSON gateway (plain HTTP).
//
// Endpoints fail over: a call that cannot reach one endpoint (or times out there) goes to the
// next, and the next call starts at the one that answered. Calls reuse kept-alive connections
// shared by the process (etcd_client.h).
//
// Leases: the etcd stores of one process with the same endpoints, request timeout and TTL share
// one etcd lease (TTL = lease_ttl rounded up to whole seconds, at least 1; etcd may raise it to
// its minimum), granted at the first leased Put and kept alive every TTL/3 by one thread. Each
// round also checks, in one transaction per 64 keys of all those stores, that the owned keys
// still hold their writers' values: one deleted meanwhile is written again, one another writer
// holds is given up (TakenOver). When etcd reports the lease gone (expired during an outage, or
// revoked), a new lease is granted and every owned key is written again with it. Conditional
// writes (PutOptions::replaces, DeleteIf) are transactions comparing the value.
// Destroying a store deletes the keys it still owns, each only while it holds its value (the
// process's last store revokes the lease instead, deleting them in one request; a key another
// client took over is on that client's lease). Abandon() leaves its keys to expire within the
// TTL as a crash would: the shared lease is dropped unrevoked, and the other stores' keys are
// written again under a new one at once; a leased Put after Abandon() fails kBusy.
// watcher() is non-null: watches stream /v3/watch and survive etcd restarts.
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
