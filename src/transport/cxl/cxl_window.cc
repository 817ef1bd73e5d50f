#include "transport/cxl/cxl_window.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <limits>
#include <string_view>

#include "common/log.h"

namespace ferry::cxl {
namespace {

// The Status for a failed system call on the window at `path`.
Status ErrnoStatus(int err, const std::string& what, const std::string& path) {
  const std::string message = "cxl window '" + path + "': " + what + ": " + ErrnoText(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return NotFoundError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return PermissionDeniedError(message);
    case EINVAL:
    case EISDIR:
      return InvalidArgumentError(message);
    default:
      return UnavailableError(message);
  }
}

// The size of the DAX character device `st`, from sysfs; NotFound when sysfs does not say.
Result<uint64_t> DeviceSize(const struct stat& st) {
  const std::string dir = "/sys/dev/char/" + std::to_string(major(st.st_rdev)) + ":" +
                          std::to_string(minor(st.st_rdev));
  for (const std::string& file : {dir + "/size", dir + "/device/size"}) {
    std::ifstream in(file);
    std::string text;
    if (!(in >> text)) continue;
    uint64_t size = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), size);
    if (ec == std::errc() && end == text.data() + text.size() && size > 0) return size;
  }
  return NotFoundError("no readable size in " + dir);
}

// The size to map: `wanted`, or the file's/device's size when 0. Grows a short regular file.
Result<uint64_t> ResolveSize(int fd, const struct stat& st, uint64_t wanted,
                             const std::string& path) {
  if (S_ISCHR(st.st_mode)) {
    Result<uint64_t> device = DeviceSize(st);
    if (!device.ok()) {
      if (wanted > 0) return wanted;  // trust the caller; mmap fails if it is too large
      return InvalidArgumentError("cxl window '" + path +
                                  "': cannot tell the device's size; set window_size (" +
                                  device.status().message() + ")");
    }
    if (wanted > *device) {
      return InvalidArgumentError("cxl window '" + path + "': window_size " +
                                  std::to_string(wanted) + " exceeds the device's " +
                                  std::to_string(*device) + " bytes (a device is never grown)");
    }
    return wanted == 0 ? *device : wanted;
  }
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgumentError("cxl window '" + path +
                                "' is neither a regular file nor a character (DAX) device");
  }
  const auto current = static_cast<uint64_t>(st.st_size);
  if (wanted == 0) {
    if (current == 0) {
      return InvalidArgumentError("cxl window '" + path + "' is empty and window_size is 0");
    }
    return current;
  }
  if (wanted > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
    return InvalidArgumentError("cxl window_size " + std::to_string(wanted) + " is too large");
  }
  if (current < wanted && ftruncate(fd, static_cast<off_t>(wanted)) != 0) {
    return ErrnoStatus(errno, "grow to " + std::to_string(wanted) + " bytes", path);
  }
  return wanted;
}

// Maps `size` bytes of `fd` shared: MAP_SYNC when the file supports it, plain MAP_SHARED
// otherwise. Sets *synchronous accordingly.
Result<uint8_t*> MapShared(int fd, uint64_t size, const std::string& path, bool* synchronous) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED_VALIDATE | MAP_SYNC, fd, 0);
  *synchronous = p != MAP_FAILED;
  if (p == MAP_FAILED) {
    // EOPNOTSUPP: the file is not on DAX; EINVAL: a kernel without MAP_SHARED_VALIDATE.
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (p == MAP_FAILED) {
    return ErrnoStatus(errno, "mmap " + std::to_string(size) + " bytes", path);
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

Result<std::unique_ptr<CxlWindow>> CxlWindow::Open(const std::string& path, uint64_t size) {
  if (path.empty()) {
    return InvalidArgumentError("cxl window_path is empty: the cxl transport has no window");
  }
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  struct stat st = {};
  if (fstat(fd, &st) != 0) {
    const Status s = ErrnoStatus(errno, "fstat", path);
    close(fd);
    return s;
  }
  Result<uint64_t> mapped_size = ResolveSize(fd, st, size, path);
  if (!mapped_size.ok()) {
    close(fd);
    return mapped_size.status();
  }
  bool synchronous = false;
  Result<uint8_t*> base = MapShared(fd, *mapped_size, path, &synchronous);
  if (!base.ok()) {
    close(fd);
    return base.status();
  }
  WindowIdentity identity{path, *mapped_size, static_cast<uint64_t>(st.st_dev),
                          static_cast<uint64_t>(st.st_ino)};
  return std::unique_ptr<CxlWindow>(new CxlWindow(fd, *base, std::move(identity), synchronous));
}

CxlWindow::~CxlWindow() {
  if (munmap(base_, identity_.size) != 0) {
    FERRY_LOG(kWarn) << "cxl window '" << identity_.path << "': munmap: " << ErrnoText(errno);
  }
  close(fd_);  // releases this window's byte-range locks (CxlAllocator)
}

bool CxlWindow::Contains(uint64_t addr, uint64_t length) const {
  const auto start = reinterpret_cast<uint64_t>(base_);
  return length > 0 && addr >= start && addr - start <= identity_.size &&
         length <= identity_.size - (addr - start);
}

}  // namespace ferry::cxl
