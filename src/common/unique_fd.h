// UniqueFd: owns one file descriptor and closes it on destruction. Move-only. The one owner
// type for fds across the rooms (sockets of rpc/, tcp/, samehost/; memfds; windows).
//
// Thread contract: thread-compatible (one owner at a time).
#pragma once

namespace ferry {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership; returns the fd (or -1).
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes the fd owned, if any, and owns `fd` instead.
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

}  // namespace ferry
