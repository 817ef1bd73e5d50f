// The cxl transport in the conformance suite: every transport of a case maps one window, a
// file in /dev/shm made for this process and removed when it exits. Buffers come from the
// window (AllocateShared), since cxl reaches nothing else.
#include <fcntl.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "transport/conformance/conformance.h"
#include "transport/cxl/cxl_runtime.h"
#include "transport/cxl/cxl_transport.h"

namespace ferry {
namespace {

constexpr uint64_t kWindowSize = uint64_t{256} << 20;  // sparse: only touched pages cost

// The window file of this process; made on first use, removed at exit.
class ConformanceWindow {
 public:
  ConformanceWindow()
      : path_("/dev/shm/ferry-cxl-conformance-" + std::to_string(::getpid()) + ".window") {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) ::close(fd);
  }
  ~ConformanceWindow() { ::unlink(path_.c_str()); }
  ConformanceWindow(const ConformanceWindow&) = delete;
  ConformanceWindow& operator=(const ConformanceWindow&) = delete;
  const std::string& path() const { return path_; }

 private:
  const std::string path_;
};

const std::string& WindowPath() {
  static const ConformanceWindow window;
  return window.path();
}

// Allocates through the transport; the deleter frees through the shared window state, which
// stays valid even when the transport is gone first.
Result<std::shared_ptr<uint8_t>> AllocateInWindow(Transport& owner, size_t length) {
  auto* transport = dynamic_cast<CxlTransport*>(&owner);
  if (transport == nullptr) return InvalidArgumentError("not a cxl transport");
  std::shared_ptr<cxl::WindowState> state = transport->window_state();
  if (state == nullptr) return BusyError("cxl transport not started");
  ASSIGN_OR_RETURN(void* memory, transport->AllocateShared(length, Location::Cpu()));
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(memory),
                                  [state](uint8_t* p) { state->allocator->Free(p).IgnoreError(); });
}

const bool registered_cxl = conformance::Register({
    .name = "cxl",
    .transport = "cxl",
    .make =
        [] {
          CxlTransportOptions options;
          options.window_path = WindowPath();
          options.window_size = kWindowSize;
          return std::make_unique<CxlTransport>(options);
        },
    .unavailable = {},
    .allocate = AllocateInWindow,
});

}  // namespace
}  // namespace ferry
