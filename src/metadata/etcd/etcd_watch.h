// The etcd plug-in's Watch: one background thread per watch holding a streaming
// POST /v3/watch, reconnecting across the endpoints with a bounded backoff and resuming from the
// last delivered revision + 1. When etcd has compacted that revision away, it lists the prefix,
// reports a kPut for every key (MetadataStore's "resynced" events) and continues from the list's
// revision + 1. Private to the etcd plug-in.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "ferry/status.h"
#include "metadata/etcd/etcd_client.h"
#include "metadata/metadata_store.h"

namespace ferry {

// Starts watching keys under `prefix` for changes after the store's current revision (read with
// one bounded range call; if etcd cannot be asked, the watch resyncs once it connects, so no
// change is missed). `client` is shared with the store: the watch may outlive it.
// Errors: none today beyond InvalidArgument for a null callback; connection trouble is handled
// in the background (logged, retried).
Result<std::unique_ptr<WatchHandle>> StartEtcdWatch(std::shared_ptr<EtcdClient> client,
                                                    std::string_view prefix,
                                                    WatchCallback callback);

// As above but from `start_revision` (> 0: deliver changes from that revision on; 0: resync
// first). For tests that need a compacted start.
Result<std::unique_ptr<WatchHandle>> StartEtcdWatchAt(std::shared_ptr<EtcdClient> client,
                                                      std::string_view prefix,
                                                      WatchCallback callback,
                                                      int64_t start_revision);

}  // namespace ferry
