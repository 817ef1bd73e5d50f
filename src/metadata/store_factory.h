// Connection string -> MetadataStore (the forms users of Mooncake-style engines already write):
//
//   etcd://h:p[,h2:p2,...]       etcd v3 through its JSON gateway; several endpoints fail over
//   h:p[,h2:p2,...]              the same (a bare endpoint list means etcd)
//   redis://[user:pass@]h:p[/db] redis
//   http://h:p/path              a Mooncake-compatible HTTP metadata server (GET/PUT/DELETE ?key=)
//   P2PHANDSHAKE                 no store: descriptors come from each peer's own RPC service
//   memory://[name]              in-process store shared by every client of the same name (tests)
//
// Anything else is InvalidArgument listing these forms. Parsing alone, without a connection:
// ParseStoreAddress (metadata/store_address.h).
// The etcd and redis clients of one connection string (and request timeout) in a process share
// their watch streams (metadata/shared_watch.h): one stream per prefix, however many engines.
#pragma once

#include <memory>
#include <string_view>

#include "ferry/status.h"
#include "metadata/metadata_store.h"
#include "metadata/store_address.h"

namespace ferry {

class P2PDescriptorSource;

// Parses and connects. `p2p` serves P2PHANDSHAKE lookups (borrowed; must outlive the store);
// it may be null for every other form.
Result<std::unique_ptr<MetadataStore>> CreateMetadataStore(std::string_view connection,
                                                           const StoreOptions& options,
                                                           P2PDescriptorSource* p2p = nullptr);

}  // namespace ferry
