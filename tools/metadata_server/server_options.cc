#include "metadata_server/server_options.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <optional>
#include <string_view>

#include "common/log.h"

namespace ferry::metadata_server {
namespace {

std::optional<uint64_t> ParseUnsigned(std::string_view text) {
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

Status BadValue(std::string_view flag, std::string_view value, std::string_view want) {
  return InvalidArgumentError("bad value '" + std::string(value) + "' for " + std::string(flag) +
                              " (" + std::string(want) + ")");
}

// Checks one flag's value and applies it to `out`.
Status ApplyFlag(std::string_view flag, std::string_view value, ServerOptions& out) {
  if (flag == "--bind") {
    if (value.empty()) return BadValue(flag, value, "an address");
    out.bind = std::string(value);
  } else if (flag == "--port") {
    const auto port = ParseUnsigned(value);
    if (!port || *port > 65535) return BadValue(flag, value, "0..65535");
    out.port = static_cast<int>(*port);
  } else if (flag == "--path") {
    if (value.empty() || value.front() != '/' ||
        value.find_first_of("?# ") != std::string_view::npos) {
      return BadValue(flag, value, "an absolute path without '?', '#' or spaces");
    }
    out.path = std::string(value);
  } else if (flag == "--data") {
    out.data = std::string(value);
  } else if (flag == "--max-body") {
    const auto bytes = ParseUnsigned(value);
    if (!bytes || *bytes == 0) return BadValue(flag, value, "a positive number of bytes");
    out.max_body = static_cast<size_t>(*bytes);
  } else if (flag == "--max-keys") {
    const auto keys = ParseUnsigned(value);
    if (!keys || *keys == 0) return BadValue(flag, value, "a positive number of keys");
    out.max_keys = static_cast<size_t>(*keys);
  } else if (flag == "--journal-compact-bytes") {
    const auto bytes = ParseUnsigned(value);
    if (!bytes || *bytes == 0) return BadValue(flag, value, "a positive number of bytes");
    out.journal_compact_bytes = *bytes;
  } else if (flag == "--log-level") {
    LogLevel level;
    if (!ParseLogLevel(value, &level))
      return BadValue(flag, value, "trace|debug|info|warn|error|off");
    out.log_level = std::string(value);
  } else {
    return InternalError("no check for flag '" + std::string(flag) + "'");
  }
  return Status::Ok();
}

}  // namespace

Result<ServerOptions> ParseServerOptions(const std::vector<std::string>& args) {
  // CLI11 reads the command line's shape (flag names, "--flag value" and "--flag=value", a
  // missing value, an unknown flag or a stray word); each value is then checked by ApplyFlag,
  // in this order, with the messages above. A flag given twice takes its last value.
  CLI::App app("ferry-metadata-server", "ferry-metadata-server");
  app.set_help_flag();  // --help is a flag like the others: main prints ServerUsage()
  app.allow_extras();   // what CLI11 does not know is reported below, as before
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  ServerOptions out;
  app.add_flag("-h,--help", out.help);
  static constexpr const char* kValueFlags[] = {"--bind",
                                                "--port",
                                                "--path",
                                                "--data",
                                                "--max-body",
                                                "--max-keys",
                                                "--journal-compact-bytes",
                                                "--log-level"};
  std::vector<std::string> values(std::size(kValueFlags));
  std::vector<CLI::Option*> options;
  for (size_t i = 0; i < std::size(kValueFlags); ++i) {
    options.push_back(app.add_option(kValueFlags[i], values[i]));
  }
  // CLI11 takes the words reversed. "--flag=value" goes in as "--flag" "value": CLI11 2.1 reads
  // "--data=" as a --data without its value and takes the next word for it, where an empty
  // value was meant ("--data=": memory only).
  std::vector<std::string> reversed;
  for (auto it = args.rbegin(); it != args.rend(); ++it) {
    const size_t eq = it->find('=');
    if (it->starts_with("--") && eq != std::string::npos) {
      reversed.push_back(it->substr(eq + 1));
      reversed.push_back(it->substr(0, eq));
    } else {
      reversed.push_back(*it);
    }
  }
  try {
    app.parse(reversed);
  } catch (const CLI::ArgumentMismatch& e) {  // "--port: 1 required TEXT missing"
    const std::string what = e.what();
    return InvalidArgumentError("flag " + what.substr(0, what.find(':')) + " needs a value");
  } catch (const CLI::ParseError& e) {
    return InvalidArgumentError(e.what());
  }
  if (const std::vector<std::string> extras = app.remaining(); !extras.empty()) {
    const std::string& first = extras.front();
    if (first.starts_with("--")) return InvalidArgumentError("unknown flag '" + first + "'");
    return InvalidArgumentError("unexpected argument '" + first + "'");
  }
  for (size_t i = 0; i < std::size(kValueFlags); ++i) {
    if (options[i]->count() > 0) RETURN_IF_ERROR(ApplyFlag(kValueFlags[i], values[i], out));
  }
  return out;
}

std::string ServerUsage() {
  return R"(usage: ferry-metadata-server [flags]

A metadata server speaking Mooncake's HTTP metadata API:
  GET    <path>?key=K          200 with the stored bytes | 404
  PUT    <path>?key=K[&ttl=S]  store the body; with ttl (1..86400 s) the key vanishes S seconds
                               after its last PUT. 200 | 400 | 413 (body too large) | 507 (full)
  DELETE <path>?key=K          200 (also when absent)
  GET    <path>?prefix=P       200 {"keys":[{"key":K,"value_b64":base64(V)},...]} sorted by key
  GET    /health               200 {"status":"ok","keys":N}

flags:
  --bind ADDR        address to listen on (default 127.0.0.1)
  --port N           port (default 8080; 0 picks a free one)
  --path PATH        resource path (default /metadata)
  --data FILE        persist every change and reload it at start; empty or absent: memory
                     only. FILE is a snapshot of every key (replaced atomically); each change
                     is appended to FILE.journal and fdatasynced before it is answered, and
                     the journal is folded into FILE once it passes the bound below, at
                     start and at a clean stop. A torn last journal record (a crash mid-write)
                     is dropped; a corrupt FILE or journal stops the start (exit 2).
  --journal-compact-bytes BYTES
                     fold the journal into FILE once it passes max(BYTES, FILE's size)
                     (default 4194304)
  --max-body BYTES   largest PUT body (default 16777216)
  --max-keys N       most keys held (default 1000000)
  --log-level L      trace|debug|info|warn|error|off (default: FERRY_LOG_LEVEL, else warn);
                     requests are logged at debug
  --help             this text

Prints "ready port=<port>" on stdout once listening. SIGTERM or SIGINT stops it (exit 0).
Exit codes: 0 clean stop, 1 cannot listen or serve, 2 bad flags or unreadable data file.
)";
}

}  // namespace ferry::metadata_server
