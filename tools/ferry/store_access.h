// How the ferry command reaches a metadata store and reports what failed. Shared by the
// store-reading subcommands (commands.h).
//
// Thread contract: free functions; PrintError writes stderr (one call, one line).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "commands.h"
#include "core/segment_desc.h"
#include "ferry/status.h"
#include "metadata/metadata_store.h"

namespace ferry::cli {

// Prints "ferry: <what>: <status message>" on stderr and returns `code`.
int Fail(int code, std::string_view what, const Status& status);
int Fail(int code, std::string_view what);

// Connects to the store `flags.connection` names. On failure prints why and sets *exit_code:
// kExitUsage for a string that names no store ferry can read (P2PHANDSHAKE, memory://, a
// malformed one), kExitStoreUnreachable when the store did not answer.
std::unique_ptr<MetadataStore> OpenStore(const StoreFlags& flags, int* exit_code);

// The exit code for a failed store call: kExitNotFound for NotFound, else
// kExitStoreUnreachable (could not ask, or the store's reply made no sense).
int StoreExitCode(const Status& status);

// Opens the store and reads segment `segment`'s descriptor into *out. kExitOk, or the exit code
// after printing why: the store's (OpenStore, StoreExitCode), kExitNotFound, kExitMalformed
// (naming the field that failed).
int LoadSegment(const StoreFlags& flags, const std::string& segment, SegmentDesc* out);

}  // namespace ferry::cli
