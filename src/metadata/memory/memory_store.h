// memory://[name]: an in-process MetadataStore for tests and single-process use. Every client
// created with the same name shares one backend for the life of the process, so two "engines"
// in one test process see each other. It has leases (TTL on StoreOptions::clock, refreshed by a
// LeaseKeeper like the network stores) and watches (one delivery thread per watch).
#pragma once

#include <memory>
#include <string>

#include "ferry/status.h"
#include "metadata/metadata_store.h"

namespace ferry {

// "" is the shared backend named "default".
Result<std::unique_ptr<MetadataStore>> CreateMemoryStore(const std::string& name,
                                                         const StoreOptions& options);

}  // namespace ferry
