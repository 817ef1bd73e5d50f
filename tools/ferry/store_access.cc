#include "store_access.h"

#include <cstdio>
#include <string>
#include <utility>

#include "metadata/store_address.h"
#include "metadata/store_factory.h"
#include "segment_view.h"
#include "text_table.h"

namespace ferry::cli {

int Fail(int code, std::string_view what, const Status& status) {
  std::fprintf(stderr, "ferry: %s: %s\n", Printable(what).c_str(),
               Printable(status.message()).c_str());
  return code;
}

int Fail(int code, std::string_view what) {
  std::fprintf(stderr, "ferry: %s\n", Printable(what).c_str());
  return code;
}

std::unique_ptr<MetadataStore> OpenStore(const StoreFlags& flags, int* exit_code) {
  Result<StoreAddress> address = ParseStoreAddress(flags.connection);
  if (!address.ok()) {
    *exit_code = Fail(kExitUsage, "--metadata_server", address.status());
    return nullptr;
  }
  if (address->kind == StoreAddress::Kind::kP2P) {
    *exit_code = Fail(kExitUsage,
                      "--metadata_server=P2PHANDSHAKE is not a store: each engine serves only "
                      "its own descriptor over its RPC port, so there is nothing to list; give "
                      "the etcd://, redis:// or http:// store the engines publish to");
    return nullptr;
  }
  if (address->kind == StoreAddress::Kind::kMemory) {
    *exit_code = Fail(kExitUsage,
                      "--metadata_server=memory:// is a store inside one process (for tests); "
                      "give the etcd://, redis:// or http:// store the engines publish to");
    return nullptr;
  }
  StoreOptions options;
  options.request_timeout = flags.timeout;
  Result<std::unique_ptr<MetadataStore>> store = CreateMetadataStore(flags.connection, options);
  if (!store.ok()) {
    const bool unreachable = store.status().code() != StatusCode::kInvalidArgument;
    *exit_code = Fail(unreachable ? kExitStoreUnreachable : kExitUsage,
                      "metadata store " + flags.connection, store.status());
    return nullptr;
  }
  return std::move(store).value();
}

int StoreExitCode(const Status& status) {
  return status.code() == StatusCode::kNotFound ? kExitNotFound : kExitStoreUnreachable;
}

int LoadSegment(const StoreFlags& flags, const std::string& segment, SegmentDesc* out) {
  int exit_code = kExitOk;
  std::unique_ptr<MetadataStore> store = OpenStore(flags, &exit_code);
  if (store == nullptr) return exit_code;
  Result<ListedSegment> entry = FetchSegment(*store, flags.prefix, segment);
  if (!entry.ok()) {
    if (entry.status().code() == StatusCode::kNotFound) {
      return Fail(kExitNotFound, "no segment '" + segment + "' in " + flags.connection +
                                     " (prefix '" + flags.prefix +
                                     "'; `ferry segments` lists them)");
    }
    return Fail(StoreExitCode(entry.status()), "reading segment '" + segment + "'", entry.status());
  }
  if (!entry->desc) {
    return Fail(kExitMalformed, "segment '" + segment + "': malformed descriptor",
                entry->malformed);
  }
  *out = std::move(*entry->desc);
  return kExitOk;
}

}  // namespace ferry::cli
