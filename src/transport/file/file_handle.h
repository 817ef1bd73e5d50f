// FileHandle: one opened file (or block device) the file transport reads and writes, with what
// it needs to choose O_DIRECT per request. Internal to transport/file.
//
// A file is opened twice: buffered (O_RDWR, or O_RDONLY when writing is refused), and with
// O_DIRECT when the file system allows it. The direct-I/O alignment comes from statx
// (STATX_DIOALIGN: memory and file-offset alignment); without it, from the device's logical
// block size (BLKSSZGET) for a block device, and 4096 bytes for a file. A request goes direct
// only when its memory address, file offset and length all meet that alignment.
//
// Thread contract: immutable after Open, except the registered-file slots, which the owning
// UringQueue sets (SetSlots) before the handle's first I/O and clears when the handle goes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "common/unique_fd.h"
#include "ferry/status.h"

namespace ferry::file {

class FileHandle {
 public:
  // Opens `path` as described above. NotFound / PermissionDenied / InvalidArgument naming the
  // path and errno when it cannot be opened or is neither a regular file nor a block device.
  static Result<std::unique_ptr<FileHandle>> Open(const std::string& path);
  ~FileHandle();
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;

  const std::string& path() const { return path_; }
  int buffered_fd() const { return buffered_.get(); }
  int direct_fd() const { return direct_.get(); }  // -1: no O_DIRECT here
  bool writable() const { return writable_; }
  uint64_t device() const { return device_; }
  uint64_t inode() const { return inode_; }
  uint64_t size() const { return size_; }  // at Open
  bool block_device() const { return block_device_; }
  uint32_t mem_align() const { return mem_align_; }
  uint32_t offset_align() const { return offset_align_; }

  // Whether [mem, mem + length) at file offset `offset` may go through O_DIRECT.
  bool DirectAllowed(uint64_t mem, uint64_t offset, uint64_t length) const {
    return direct_.valid() && length > 0 && mem % mem_align_ == 0 && offset % offset_align_ == 0 &&
           length % offset_align_ == 0;
  }

  // Why an access that needs the file's bytes up to `window_end` cannot go on: NotFound when
  // the file was deleted (no links left), InvalidArgument when it was truncated below
  // `window_end`; Ok when neither (fstat of the open file; block devices are never truncated).
  Status CheckIntact(uint64_t window_end) const;

  // Registered-file slots of the two fds in the owner's ring (-1: not registered), and what
  // unregisters them; run by the destructor.
  void SetSlots(int buffered_slot, int direct_slot, std::function<void()> release) {
    buffered_slot_ = buffered_slot;
    direct_slot_ = direct_slot;
    release_slots_ = std::move(release);
  }
  int buffered_slot() const { return buffered_slot_; }
  int direct_slot() const { return direct_slot_; }

 private:
  FileHandle() = default;

  std::string path_;
  UniqueFd buffered_;
  UniqueFd direct_;
  bool writable_ = false;
  uint64_t device_ = 0;
  uint64_t inode_ = 0;
  uint64_t size_ = 0;
  bool block_device_ = false;
  uint32_t mem_align_ = 4096;
  uint32_t offset_align_ = 4096;
  int buffered_slot_ = -1;
  int direct_slot_ = -1;
  std::function<void()> release_slots_;
};

// "file '<path>'" plus errno text, for messages.
std::string FileErrno(const std::string& path, std::string_view what, int err);

}  // namespace ferry::file
