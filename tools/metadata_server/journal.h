// The data file's journal, <data>.journal: the changes made since the data file (the snapshot,
// data_file.h) was written, so that a change costs one small append instead of a rewrite of
// every key.
//
// Layout: a sequence of frames, each
//
//   magic "\xffFJ1" | u32 payload length (little-endian) | u32 CRC32C of the length's 4 bytes and
//   the payload (little-endian) | payload: one JSON object
//
// The first frame is the header, naming the snapshot the journal follows:
//   {"format":"ferry-metadata-server-journal","version":1,"snapshot_bytes":N,"snapshot_crc32c":C}
// then one frame per change:
//   {"put":"<key>","value_b64":"<base64>","expires_unix_ms":E}   (E as in the data file)
//   {"delete":"<key>"}                                            (also an expired key purged)
// Each record holds the key's whole new state, so replaying a record twice changes nothing.
//
// Damage: a crash in the middle of an append leaves the journal's last frames incomplete or
// with a wrong checksum (each append is fdatasynced before the next begins, so only the last
// one can be torn). A damaged frame after which no intact frame follows is such a torn tail:
// it is dropped and the load goes on with everything before it. A damaged frame followed by an
// intact one (found by the magic, whose 0xff byte never occurs in the UTF-8 JSON payloads) is
// corruption: an error naming its offset, never a partly loaded store.
//
// Crash safety of compaction (KvStore): the snapshot is replaced first (WriteFileAtomically,
// with its directory fsync), then the journal is replaced by one holding only a header naming
// the new snapshot (WriteFileAtomically again). A crash leaves either the old snapshot with
// its journal, or the new snapshot with the old journal (whose header names the old snapshot:
// it is skipped, as everything in it is in the new snapshot; were the two snapshots
// byte-identical, replaying the old journal would change nothing, see above), or the new pair.
//
// Thread contract: the free functions are pure; JournalWriter is not thread-safe (its owner
// serializes its calls).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "ferry/status.h"
#include "metadata_server/data_file.h"

namespace ferry::metadata_server {

// Identifies a snapshot's bytes (a journal follows exactly one).
struct JournalSnapshotId {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
  bool operator==(const JournalSnapshotId&) const = default;
};
JournalSnapshotId JournalSnapshotIdOf(std::string_view snapshot);

// The journal's path beside the data file `data_path`.
std::string JournalPathFor(const std::string& data_path);

// Framed records, ready to append. Errors: Internal when a key is not valid UTF-8 (the server
// never stores one).
Result<std::string> EncodeJournalPut(std::string_view key, const Entry& entry);
Result<std::string> EncodeJournalDelete(std::string_view key);

// What replaying a journal did.
struct JournalReplay {
  bool follows_snapshot = false;  // false: its header names another snapshot; nothing applied
  size_t records = 0;             // changes applied
  uint64_t torn_offset = 0;       // where a dropped torn tail began
  uint64_t torn_bytes = 0;        // 0: none dropped
};

// Applies the journal `text` to `entries`, which hold the snapshot `snapshot`.
// Errors: InvalidArgument "at offset N: <why>" for a corrupt header or a damaged record that an
// intact one follows (`entries` is then partly changed: discard it).
Result<JournalReplay> ReplayJournal(std::string_view text, JournalSnapshotId snapshot,
                                    EntryMap& entries);

// A journal open for appending.
class JournalWriter {
 public:
  // Replaces `path` atomically (WriteFileAtomically) with a journal holding only the header
  // for `snapshot`, and opens it for appending. Errors: Unavailable with errno text.
  static Result<std::unique_ptr<JournalWriter>> Create(const std::string& path,
                                                       JournalSnapshotId snapshot);
  ~JournalWriter();
  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;

  // Appends framed `records` and fdatasyncs them: on disk when it returns OK.
  // Errors: Unavailable with errno text; the file is then cut back to its previous size (best
  // effort), and the writer must not be used again.
  Status Append(std::string_view records);

  // The journal's size in bytes.
  uint64_t size() const { return size_; }

 private:
  JournalWriter(std::string path, int fd, uint64_t size)
      : path_(std::move(path)), fd_(fd), size_(size) {}

  const std::string path_;
  int fd_;
  uint64_t size_;
};

}  // namespace ferry::metadata_server
