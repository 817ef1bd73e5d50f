#include "metadata_server/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/crc32c.h"
#include "common/log.h"
#include "core/base64.h"

namespace ferry::metadata_server {
namespace {

constexpr std::string_view kJournalMagic(
    "\xff"
    "FJ1",
    4);
constexpr size_t kJournalFrameHeader = 12;  // magic, length, CRC32C
// A record holds one key and one value, both bounded by the server's limits; a longer length is
// damage, not a record.
constexpr uint32_t kJournalMaxPayload = uint32_t{1} << 31;
constexpr std::string_view kJournalFormat = "ferry-metadata-server-journal";
constexpr int kJournalVersion = 1;

void JournalPutLe32(uint32_t v, char* out) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t JournalGetLe32(const char* in) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<unsigned char>(in[i])} << (8 * i);
  return v;
}

std::string FrameJournalPayload(std::string_view payload) {
  std::string out(kJournalFrameHeader, '\0');
  std::memcpy(out.data(), kJournalMagic.data(), 4);
  JournalPutLe32(static_cast<uint32_t>(payload.size()), out.data() + 4);
  const uint32_t crc = Crc32cExtend(Crc32c(out.data() + 4, 4), payload.data(), payload.size());
  JournalPutLe32(crc, out.data() + 8);
  out.append(payload);
  return out;
}

Result<std::string> FrameJournalJson(const nlohmann::json& record) {
  try {
    return FrameJournalPayload(record.dump());
  } catch (const std::exception& e) {
    return InternalError(std::string("encoding a journal record: ") + e.what());
  }
}

// Reads the frame at `offset`: true with its payload and the offset after it when intact;
// false with what is wrong otherwise.
bool ReadJournalFrame(std::string_view text, size_t offset, std::string_view* payload, size_t* next,
                      std::string* why) {
  const size_t left = text.size() - offset;
  if (left < kJournalFrameHeader) {
    *why = "incomplete frame header (" + std::to_string(left) + " bytes)";
    return false;
  }
  if (text.substr(offset, 4) != kJournalMagic) {
    *why = "no frame magic";
    return false;
  }
  const uint32_t length = JournalGetLe32(text.data() + offset + 4);
  if (length == 0 || length > kJournalMaxPayload) {
    *why = "bad record length " + std::to_string(length);
    return false;
  }
  if (length > left - kJournalFrameHeader) {
    *why = "record of " + std::to_string(length) + " bytes runs past the end";
    return false;
  }
  const uint32_t sent = JournalGetLe32(text.data() + offset + 8);
  const uint32_t computed = Crc32cExtend(Crc32c(text.data() + offset + 4, 4),
                                         text.data() + offset + kJournalFrameHeader, length);
  if (sent != computed) {
    *why = "checksum mismatch (stored " + Hex32(sent) + ", computed " + Hex32(computed) + ")";
    return false;
  }
  *payload = text.substr(offset + kJournalFrameHeader, length);
  *next = offset + kJournalFrameHeader + length;
  return true;
}

// Whether an intact frame begins anywhere after `offset`.
bool IntactJournalFrameAfter(std::string_view text, size_t offset) {
  for (size_t at = text.find(kJournalMagic, offset + 1); at != std::string_view::npos;
       at = text.find(kJournalMagic, at + 1)) {
    std::string_view payload;
    size_t next = 0;
    std::string why;
    if (ReadJournalFrame(text, at, &payload, &next, &why)) return true;
  }
  return false;
}

Status JournalError(size_t offset, const std::string& why) {
  return InvalidArgumentError("at offset " + std::to_string(offset) + ": " + why);
}

// Checks that `record` has exactly the fields `names`.
bool JournalFieldsAre(const nlohmann::json& record, std::initializer_list<std::string_view> names) {
  if (record.size() != names.size()) return false;
  for (std::string_view name : names) {
    if (!record.contains(name)) return false;
  }
  return true;
}

Status CheckJournalHeader(std::string_view payload, JournalSnapshotId snapshot,
                          bool* follows_snapshot) {
  const nlohmann::json doc = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() ||
      !JournalFieldsAre(doc, {"format", "version", "snapshot_bytes", "snapshot_crc32c"}) ||
      doc["format"] != kJournalFormat) {
    return JournalError(0, "not a ferry-metadata-server journal header");
  }
  if (!doc["version"].is_number_integer() || doc["version"].get<int64_t>() != kJournalVersion) {
    return JournalError(0, "unsupported journal version (this server reads version " +
                               std::to_string(kJournalVersion) + ")");
  }
  if (!doc["snapshot_bytes"].is_number_unsigned() || !doc["snapshot_crc32c"].is_number_unsigned()) {
    return JournalError(0, "the header's snapshot_bytes or snapshot_crc32c is not a number");
  }
  *follows_snapshot = doc["snapshot_bytes"].get<uint64_t>() == snapshot.bytes &&
                      doc["snapshot_crc32c"].get<uint64_t>() == snapshot.crc32c;
  return Status::Ok();
}

Status ApplyJournalRecord(std::string_view payload, size_t offset, EntryMap& entries) {
  const nlohmann::json doc = nlohmann::json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return JournalError(offset, "the record is not a JSON object");
  if (JournalFieldsAre(doc, {"delete"}) && doc["delete"].is_string()) {
    const auto it = entries.find(doc["delete"].get<std::string>());
    if (it != entries.end()) entries.erase(it);
    return Status::Ok();
  }
  if (!JournalFieldsAre(doc, {"put", "value_b64", "expires_unix_ms"}) || !doc["put"].is_string() ||
      !doc["value_b64"].is_string() || !doc["expires_unix_ms"].is_number_integer() ||
      doc["expires_unix_ms"].get<int64_t>() < 0) {
    return JournalError(offset, "the record is neither a put nor a delete");
  }
  Result<std::string> value = Base64Decode(doc["value_b64"].get<std::string>());
  if (!value.ok()) return JournalError(offset, "value_b64: " + value.status().message());
  entries.insert_or_assign(doc["put"].get<std::string>(),
                           Entry{std::move(*value), doc["expires_unix_ms"].get<int64_t>()});
  return Status::Ok();
}

}  // namespace

JournalSnapshotId JournalSnapshotIdOf(std::string_view snapshot) {
  return {.bytes = snapshot.size(), .crc32c = Crc32c(snapshot)};
}

std::string JournalPathFor(const std::string& data_path) { return data_path + ".journal"; }

Result<std::string> EncodeJournalPut(std::string_view key, const Entry& entry) {
  return FrameJournalJson({{"put", key},
                           {"value_b64", Base64Encode(entry.value)},
                           {"expires_unix_ms", entry.expires_unix_ms}});
}

Result<std::string> EncodeJournalDelete(std::string_view key) {
  return FrameJournalJson({{"delete", key}});
}

Result<JournalReplay> ReplayJournal(std::string_view text, JournalSnapshotId snapshot,
                                    EntryMap& entries) {
  try {
    JournalReplay replay;
    std::string_view payload;
    size_t offset = 0;
    std::string why;
    // The journal is created whole (WriteFileAtomically): a damaged header is never a crash's.
    if (!ReadJournalFrame(text, 0, &payload, &offset, &why)) {
      return JournalError(0, "bad header: " + why);
    }
    RETURN_IF_ERROR(CheckJournalHeader(payload, snapshot, &replay.follows_snapshot));
    if (!replay.follows_snapshot) return replay;
    while (offset < text.size()) {
      size_t next = 0;
      if (!ReadJournalFrame(text, offset, &payload, &next, &why)) {
        if (IntactJournalFrameAfter(text, offset)) {
          return JournalError(offset, why + ", and intact records follow it");
        }
        replay.torn_offset = offset;
        replay.torn_bytes = text.size() - offset;
        return replay;
      }
      RETURN_IF_ERROR(ApplyJournalRecord(payload, offset, entries));
      ++replay.records;
      offset = next;
    }
    return replay;
  } catch (const std::exception& e) {
    return InvalidArgumentError(e.what());
  }
}

Result<std::unique_ptr<JournalWriter>> JournalWriter::Create(const std::string& path,
                                                             JournalSnapshotId snapshot) {
  ASSIGN_OR_RETURN(std::string header, FrameJournalJson({{"format", kJournalFormat},
                                                         {"version", kJournalVersion},
                                                         {"snapshot_bytes", snapshot.bytes},
                                                         {"snapshot_crc32c", snapshot.crc32c}}));
  RETURN_IF_ERROR(WriteFileAtomically(path, header));
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return UnavailableError("open " + path + ": " + ErrnoText(errno));
  return std::unique_ptr<JournalWriter>(new JournalWriter(path, fd, header.size()));
}

JournalWriter::~JournalWriter() { ::close(fd_); }

Status JournalWriter::Append(std::string_view records) {
  Status s = WriteAll(fd_, records, path_);
  if (s.ok() && ::fdatasync(fd_) != 0) {
    s = UnavailableError("fdatasync " + path_ + ": " + ErrnoText(errno));
  }
  if (!s.ok()) {
    // Best effort: the next commit replaces the journal (KvStore), and a load before that drops
    // a partial append as a torn tail.
    if (::ftruncate(fd_, static_cast<off_t>(size_)) != 0) {
      FERRY_LOG(kWarn) << "cutting " << path_
                       << " back after a failed append: " << ErrnoText(errno);
    }
    return s;
  }
  size_ += records.size();
  return Status::Ok();
}

}  // namespace ferry::metadata_server
