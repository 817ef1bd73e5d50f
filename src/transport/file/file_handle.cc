#include "transport/file/file_handle.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace ferry::file {

std::string FileErrno(const std::string& path, std::string_view what, int err) {
  const char* name = err == ENOSPC   ? "ENOSPC"
                     : err == EIO    ? "EIO"
                     : err == ENOENT ? "ENOENT"
                     : err == EACCES ? "EACCES"
                     : err == EROFS  ? "EROFS"
                     : err == EBADF  ? "EBADF"
                     : err == EINVAL ? "EINVAL"
                     : err == EFBIG  ? "EFBIG"
                                     : nullptr;
  std::string out = std::string(what) + " file '" + path + "': " + std::strerror(err);
  if (name != nullptr) out += std::string(" (") + name + ")";
  return out;
}

namespace {

Status OpenError(const std::string& path, int err) {
  std::string text = FileErrno(path, "cannot open", err);
  if (err == ENOENT || err == ENOTDIR) return NotFoundError(std::move(text));
  if (err == EACCES || err == EPERM || err == EROFS) return PermissionDeniedError(std::move(text));
  return InvalidArgumentError(std::move(text));
}

}  // namespace

Result<std::unique_ptr<FileHandle>> FileHandle::Open(const std::string& path) {
  std::unique_ptr<FileHandle> h(new FileHandle());
  h->path_ = path;
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  h->writable_ = fd >= 0;
  if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM)) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (fd < 0) return OpenError(path, errno);
  h->buffered_.Reset(fd);

  struct statx stx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS | STATX_DIOALIGN, &stx) != 0) {
    return InvalidArgumentError(FileErrno(path, "cannot stat", errno));
  }
  const mode_t type = stx.stx_mode & S_IFMT;
  if (type != S_IFREG && type != S_IFBLK) {
    return InvalidArgumentError("file '" + path + "' is neither a regular file nor a block device");
  }
  h->block_device_ = type == S_IFBLK;
  h->device_ = makedev(stx.stx_dev_major, stx.stx_dev_minor);
  h->inode_ = stx.stx_ino;
  h->size_ = stx.stx_size;
  if (h->block_device_) {
    uint64_t bytes = 0;
    if (::ioctl(fd, BLKGETSIZE64, &bytes) != 0) {
      return InvalidArgumentError(FileErrno(path, "cannot read the size of block device", errno));
    }
    h->size_ = bytes;
  }

  // Direct I/O: the alignment the kernel reports, else the logical block size.
  uint32_t mem_align = 0;
  uint32_t offset_align = 0;
  if ((stx.stx_mask & STATX_DIOALIGN) != 0) {
    mem_align = stx.stx_dio_mem_align;
    offset_align = stx.stx_dio_offset_align;  // 0: no direct I/O on this file
  } else {
    int logical = 4096;
    if (h->block_device_ && ::ioctl(fd, BLKSSZGET, &logical) != 0) logical = 4096;
    mem_align = offset_align = static_cast<uint32_t>(logical);
  }
  if (offset_align != 0) {
    const int dfd = ::open(path.c_str(), (h->writable_ ? O_RDWR : O_RDONLY) | O_DIRECT | O_CLOEXEC);
    if (dfd >= 0) {
      h->direct_.Reset(dfd);
      h->mem_align_ = std::max<uint32_t>(mem_align, 1);
      h->offset_align_ = offset_align;
    } else {
      FERRY_LOG(kDebug) << FileErrno(path, "no O_DIRECT for", errno) << "; buffered only";
    }
  }
  return h;
}

FileHandle::~FileHandle() {
  if (release_slots_) release_slots_();
}

Status FileHandle::CheckIntact(uint64_t window_end) const {
  struct stat st {};
  if (::fstat(buffered_.get(), &st) != 0) {
    return InvalidArgumentError(FileErrno(path_, "cannot stat", errno));
  }
  if (st.st_nlink == 0) {
    return NotFoundError("file '" + path_ + "' vanished: it was deleted while registered");
  }
  if (!block_device_ && static_cast<uint64_t>(st.st_size) < window_end) {
    return InvalidArgumentError(
        "file '" + path_ + "' was truncated to " + std::to_string(st.st_size) +
        " bytes, below the end of its window (" + std::to_string(window_end) + ")");
  }
  return Status::Ok();
}

}  // namespace ferry::file
