// The shared-memory half of the grant channel (grant_channel.h): the target's lease table and
// each connection's pin slot, both arrays of 8-byte atomic words in a sealed memfd. Internal to
// transport/samehost.
//
//   table word i  (written by the target only; initiators map it read-only):
//                 sequence << 2 | state, state kFree / kLive / kClosing. The sequence grows each
//                 time entry i is leased anew, so a word an initiator cached names one lease of
//                 one region: a later lease of entry i never matches it.
//   slot word i   (one slot per grant connection; written by its initiator, read by the target):
//                 how many pins that connection holds through entry i.
//
// An initiator pins through entry i by incrementing its slot word i and then re-reading table
// word i (both seq_cst); the target closes entry i by storing kClosing (seq_cst) and then reading
// every slot's word i. Whichever runs second sees the other: either the initiator sees kClosing
// (and takes its increment back) or the target sees the pin (and waits for it).
//
// Thread contract: SharedWords is thread-safe (atomic words; immutable mapping).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/unique_fd.h"
#include "core/buffer_desc.h"
#include "ferry/status.h"

namespace ferry::samehost::pins {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared words must be lock-free");

constexpr uint64_t kFree = 0;
constexpr uint64_t kLive = 1;
constexpr uint64_t kClosing = 2;
constexpr uint64_t kStateMask = 3;
// An Acquire reply's lease index when the range got no lease (see grant_wire.h).
constexpr uint32_t kNoLease = ~uint32_t{0};
// The most entries a table may have (GrantServer::Options::lease_table_entries).
constexpr size_t kMaxEntries = size_t{1} << 20;

constexpr uint64_t Word(uint64_t sequence, uint64_t state) { return sequence << 2 | state; }
constexpr uint64_t StateOf(uint64_t word) { return word & kStateMask; }

// `count` atomic words in a memfd mapped MAP_SHARED; unmapped on destruction.
class SharedWords {
 public:
  // A new memfd of `count` zeroed words, mapped read-write, sealed against shrinking and growing
  // (a peer holding the fd cannot make this mapping fault). `peers_read_only`: also sealed
  // against every later writable mapping (F_SEAL_FUTURE_WRITE), so a peer can only read it.
  // Unavailable when the kernel refuses.
  static Result<std::unique_ptr<SharedWords>> Create(const char* name, size_t count,
                                                     bool peers_read_only);
  // Maps `fd` (received from a peer; the caller keeps owning it) when it holds exactly `count`
  // words and is sealed against shrinking; read-only unless `writable`. InvalidArgument when the
  // file is not what it should be; Unavailable when the kernel refuses.
  static Result<std::unique_ptr<SharedWords>> Map(int fd, size_t count, bool writable);
  ~SharedWords();
  SharedWords(const SharedWords&) = delete;
  SharedWords& operator=(const SharedWords&) = delete;

  std::atomic<uint64_t>& at(size_t i) const { return words_[i]; }
  size_t count() const { return count_; }
  // The memfd (Create only; -1 for a mapping of a received fd), to send to a peer.
  int fd() const { return fd_.get(); }

 private:
  SharedWords(std::atomic<uint64_t>* words, size_t count, UniqueFd fd)
      : words_(words), count_(count), fd_(std::move(fd)) {}
  std::atomic<uint64_t>* const words_;
  const size_t count_;
  const UniqueFd fd_;
};

}  // namespace ferry::samehost::pins
