#include "metadata_server/data_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "core/base64.h"

namespace ferry::metadata_server {
namespace {

constexpr std::string_view kFormat = "ferry-metadata-server";
constexpr int kVersion = 1;

Status IoError(std::string_view what, const std::string& path, int err) {
  return UnavailableError(std::string(what) + " " + path + ": " + ErrnoText(err));
}

// Closes an fd on scope exit.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;
  // Closes now; returns close()'s errno, or 0.
  int Close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

Status FsyncDirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError("open directory", dir, errno);
  FdCloser closer(fd);
  if (::fsync(fd) != 0) return IoError("fsync directory", dir, errno);
  return Status::Ok();
}

Result<Entry> DecodeEntry(const nlohmann::json& item, size_t index, std::string* key) {
  const std::string where = "keys[" + std::to_string(index) + "]";
  if (!item.is_object()) return InvalidArgumentError(where + " is not an object");
  for (const auto& [name, unused] : item.items()) {
    if (name != "key" && name != "value_b64" && name != "expires_unix_ms") {
      return InvalidArgumentError(where + " has unknown field '" + name + "'");
    }
  }
  const auto k = item.find("key");
  const auto v = item.find("value_b64");
  const auto e = item.find("expires_unix_ms");
  if (k == item.end() || !k->is_string()) return InvalidArgumentError(where + ".key is missing");
  if (v == item.end() || !v->is_string()) {
    return InvalidArgumentError(where + ".value_b64 is missing");
  }
  if (e == item.end() || !e->is_number_integer() || e->get<int64_t>() < 0) {
    return InvalidArgumentError(where + ".expires_unix_ms is missing or negative");
  }
  Result<std::string> value = Base64Decode(v->get<std::string>());
  if (!value.ok()) return InvalidArgumentError(where + ".value_b64: " + value.status().message());
  *key = k->get<std::string>();
  return Entry{std::move(*value), e->get<int64_t>()};
}

}  // namespace

Result<std::string> EncodeDataFile(const EntryMap& entries) {
  try {
    nlohmann::json keys = nlohmann::json::array();
    for (const auto& [key, entry] : entries) {
      keys.push_back({{"key", key},
                      {"value_b64", Base64Encode(entry.value)},
                      {"expires_unix_ms", entry.expires_unix_ms}});
    }
    nlohmann::json doc = {{"format", kFormat}, {"version", kVersion}, {"keys", std::move(keys)}};
    return doc.dump() + "\n";
  } catch (const std::exception& e) {
    return InternalError(std::string("encoding the data file: ") + e.what());
  }
}

Result<EntryMap> DecodeDataFile(std::string_view text) {
  try {
    const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return InvalidArgumentError("not valid JSON");
    if (!doc.is_object()) return InvalidArgumentError("not a JSON object");
    const auto format = doc.find("format");
    if (format == doc.end() || !format->is_string() || format->get<std::string>() != kFormat) {
      return InvalidArgumentError("\"format\" is not \"" + std::string(kFormat) + "\"");
    }
    const auto version = doc.find("version");
    if (version == doc.end() || !version->is_number_integer() ||
        version->get<int64_t>() != kVersion) {
      return InvalidArgumentError("unsupported \"version\" (this server reads version " +
                                  std::to_string(kVersion) + ")");
    }
    const auto keys = doc.find("keys");
    if (keys == doc.end() || !keys->is_array())
      return InvalidArgumentError("\"keys\" is not an array");
    EntryMap out;
    for (size_t i = 0; i < keys->size(); ++i) {
      std::string key;
      ASSIGN_OR_RETURN(Entry entry, DecodeEntry((*keys)[i], i, &key));
      if (!out.emplace(std::move(key), std::move(entry)).second) {
        return InvalidArgumentError("keys[" + std::to_string(i) + "] repeats a key");
      }
    }
    return out;
  } catch (const std::exception& e) {
    return InvalidArgumentError(e.what());
  }
}

Status WriteAll(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("write", path, errno);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Result<std::optional<std::string>> ReadFileIfExists(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return std::optional<std::string>();
  if (fd < 0) return IoError("open", path, errno);
  FdCloser closer(fd);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError("read", path, errno);
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return std::optional<std::string>(std::move(out));
}

Status WriteFileAtomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError("open", tmp, errno);
  FdCloser closer(fd);
  Status s = WriteAll(fd, bytes, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = IoError("fsync", tmp, errno);
  if (s.ok()) {
    if (const int err = closer.Close(); err != 0) s = IoError("close", tmp, err);
  }
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) s = IoError("rename to", path, errno);
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  return FsyncDirectoryOf(path);
}

}  // namespace ferry::metadata_server
