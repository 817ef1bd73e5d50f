// Shared watches: one store watch per process, connection and prefix, however many store
// clients of that connection watch it (issue 17).
//
// Every engine's SegmentDirectory watches "<prefix>/ram/" and so receives every descriptor
// change in the cluster. With one watch per engine, a process running E engines holds E watch
// streams (a thread and a connection each), the store pushes every change E times to it, and
// every engine decodes every event: with N engines in all, a restart storm costs the store and
// the engines O(N^2) event deliveries. bench/scale.sh measured it: 1,000 engines in 4 processes,
// each with its own watch, overloaded etcd on a 2-core host until leases expired. ShareWatches
// makes the watches of one process share one stream per (connection, prefix): the store pushes
// each change once per process, and the process hands it to each watcher in turn.
//
// Behaviour seen by a watcher is that of MetadataStore's Watch: events in store order, one at a
// time; every change made after Watch returns is reported (the shared stream is already live, or
// is started by this Watch as the store's own would be); "resynced" events after a reconnect go
// to every watcher. A watcher may additionally see events of changes made shortly before it
// joined (harmless: a consumer may see a change twice). Destroying a handle stops its delivery:
// after the destructor returns its callback is not running and will not run again; the last
// handle of a stream stops the stream. A callback may destroy other handles, never its own.
// The stream is started through the first watcher's store and keeps running when that store is
// destroyed: the etcd and redis watches hold their own reference to the client, whose settings
// (endpoints, credentials, request timeout) the share key covers. One difference: a Watch that
// joins a live stream succeeds even while the store is unreachable (the stream is reconnecting;
// the store's own Watch would fail): the changes reach it when the stream resumes or resyncs.
// Starting a stream (one bounded store call) holds up only the Watch calls of that same stream.
//
// Thread contract: thread-safe. Callbacks run on the shared stream's thread, one watcher after
// the other, so a slow callback delays the other watchers of that stream in this process.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "metadata/metadata_store.h"

namespace ferry {

// Wraps `store` so that its watcher() shares streams with every other store wrapped under the
// same `share_key` (the connection string and whatever else makes two clients' streams
// interchangeable). Every other call goes to `store` unchanged. A store without a watcher is
// returned as it is.
std::unique_ptr<MetadataStore> ShareWatches(std::unique_ptr<MetadataStore> store,
                                            std::string share_key);

// Shared streams alive in this process (for tests and stats).
size_t SharedWatchStreams();

}  // namespace ferry
