// Command-line options of ferry-metadata-server, parsed once at the edge (STYLE.md 12).
//
// Thread contract: value type and pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry/status.h"

namespace ferry::metadata_server {

struct ServerOptions {
  std::string bind = "127.0.0.1";      // address to listen on
  int port = 8080;                     // 0: pick a free port (printed on the ready line)
  std::string path = "/metadata";      // the key/value resource, as in Mooncake's server
  std::string data;                    // data file; empty: keys live in memory only
  size_t max_body = size_t{16} << 20;  // larger PUT bodies are answered 413
  size_t max_keys = 1000000;           // PUT of a new key beyond this is answered 507
  uint64_t journal_compact_bytes = uint64_t{4} << 20;  // KvStore::Options
  std::string log_level;                               // empty: FERRY_LOG_LEVEL or warn
  bool help = false;                                   // --help was given
};

// Parses argv[1..] with CLI11 ("--flag value" or "--flag=value"; a later flag overrides an
// earlier one). Errors: InvalidArgument naming the flag (unknown flag, missing or out-of-range
// value) or the stray argument.
Result<ServerOptions> ParseServerOptions(const std::vector<std::string>& args);

// The --help text.
std::string ServerUsage();

}  // namespace ferry::metadata_server
