// The server's data file: every key with its value and absolute expiry, as JSON. It is the
// snapshot the journal beside it (journal.h) follows; KvStore rewrites it when it compacts.
//
//   {"format":"ferry-metadata-server","version":1,
//    "keys":[{"key":"k","value_b64":"<base64 of the stored bytes>","expires_unix_ms":0}, ...]}
//
// expires_unix_ms is wall-clock time (ms since the Unix epoch); 0 means no TTL. Keys are UTF-8
// (the server refuses others). Decoding is strict: anything malformed is an error, never a
// partly loaded store.
//
// Thread contract: pure functions and stateless file I/O; safe from any thread, but two writers
// of the same path must be serialized by the caller.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "ferry/status.h"

namespace ferry::metadata_server {

struct Entry {
  std::string value;
  int64_t expires_unix_ms = 0;  // 0: never
};

using EntryMap = std::map<std::string, Entry, std::less<>>;

// Errors: Internal when a key is not valid UTF-8 (the server never stores one).
Result<std::string> EncodeDataFile(const EntryMap& entries);

// Errors: InvalidArgument saying what is malformed.
Result<EntryMap> DecodeDataFile(std::string_view text);

// Writes all of `bytes` to `fd` (continuing short writes and EINTR). `path` names the file in
// errors: Unavailable "write <path>: <errno text>".
Status WriteAll(int fd, std::string_view bytes, const std::string& path);

// The file's bytes, or nullopt when it does not exist.
// Errors: Unavailable with errno text when it exists but cannot be read.
Result<std::optional<std::string>> ReadFileIfExists(const std::string& path);

// Replaces `path` with `bytes` so that a crash leaves either the old or the new file: writes
// path.tmp, fsyncs it, renames it over `path` and fsyncs the directory.
// Errors: Unavailable with errno text. `path` then holds the old bytes, or the new ones when
// only the directory fsync failed.
Status WriteFileAtomically(const std::string& path, std::string_view bytes);

}  // namespace ferry::metadata_server
