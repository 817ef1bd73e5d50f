#include "transport/tcp/io_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <system_error>

#include "common/log.h"

namespace ferry::tcp {

Result<std::unique_ptr<IoLoop>> IoLoop::Create(std::chrono::milliseconds tick) {
  UniqueFd epoll(epoll_create1(EPOLL_CLOEXEC));
  if (!epoll.valid()) return InternalError("epoll_create1: " + ErrnoText(errno));
  UniqueFd wake(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake.valid()) return InternalError("eventfd: " + ErrnoText(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake fd
  if (epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &ev) != 0) {
    return InternalError("epoll_ctl: " + ErrnoText(errno));
  }
  std::unique_ptr<IoLoop> loop(new IoLoop(std::move(epoll), std::move(wake), tick));
  try {
    loop->thread_ = std::thread([raw = loop.get()] { raw->Run(); });
  } catch (const std::system_error& e) {
    return InternalError(std::string("tcp i/o thread: ") + e.what());
  }
  return loop;
}

IoLoop::IoLoop(UniqueFd epoll, UniqueFd wake, std::chrono::milliseconds tick)
    : epoll_(std::move(epoll)),
      wake_(std::move(wake)),
      tick_(std::max(tick, std::chrono::milliseconds(1))) {}

IoLoop::~IoLoop() { Stop(CanceledError("tcp i/o loop destroyed")); }

bool IoLoop::Post(Task task) {
  {
    MutexLock lock(mu_);
    if (stopping_) return false;
    inbox_.push_back(std::move(task));
  }
  const uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
  return true;
}

void IoLoop::RequestStop(const Status& why) {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    stop_reason_ = why;
  }
  const uint64_t one = 1;
  (void)!write(wake_.get(), &one, sizeof(one));
}

void IoLoop::Join() {
  MutexLock lock(join_mu_);
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    // A broken ownership invariant (the runtime must never die on its own loop); joining here
    // would throw. The thread exits on its own once stopping.
    FERRY_LOG(kError) << "tcp i/o loop joined from its own thread; detaching";
    thread_.detach();
    return;
  }
  thread_.join();
}

Status IoLoop::Watch(std::shared_ptr<IoHandler> handler, int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = handler.get();
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
    return InternalError("epoll_ctl add: " + ErrnoText(errno));
  }
  IoHandler* key = handler.get();
  handlers_.emplace(key, std::move(handler));
  return Status::Ok();
}

void IoLoop::Modify(IoHandler* handler, int fd, uint32_t events) {
  epoll_event ev{};
  ev.events = events;
  ev.data.ptr = handler;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, fd, &ev) != 0) {
    FERRY_LOG(kError) << "tcp epoll_ctl mod: " << ErrnoText(errno);
  }
}

void IoLoop::Unwatch(IoHandler* handler, int fd) {
  (void)epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  auto it = handlers_.find(handler);
  if (it == handlers_.end()) return;
  graveyard_.push_back(std::move(it->second));
  handlers_.erase(it);
}

bool IoLoop::RunTasks(bool* stopping) {
  std::vector<Task> tasks;
  {
    MutexLock lock(mu_);
    tasks.swap(inbox_);
    *stopping = stopping_;
  }
  for (Task& task : tasks) task();
  return !tasks.empty();
}

void IoLoop::Tick(TimePoint now) {
  std::vector<std::shared_ptr<IoHandler>> all;
  all.reserve(handlers_.size());
  for (auto& [key, handler] : handlers_) all.push_back(handler);
  for (auto& handler : all) {
    if (handlers_.count(handler.get()) != 0) handler->OnTick(now);
  }
}

void IoLoop::ShutdownAll() {
  Status why;
  {
    MutexLock lock(mu_);
    why = stop_reason_;
  }
  // Shutting one handler down may unwatch it (and, for a listener, post nothing: stopping).
  while (!handlers_.empty()) {
    std::shared_ptr<IoHandler> handler = handlers_.begin()->second;
    handler->Shutdown(why);
    handlers_.erase(handler.get());
  }
  graveyard_.clear();
}

void IoLoop::Run() {
  std::array<epoll_event, 64> events{};
  TimePoint next_tick = std::chrono::steady_clock::now() + tick_;
  for (;;) {
    bool stopping = false;
    const bool ran = RunTasks(&stopping);
    if (stopping && !ran) break;
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(next_tick - std::chrono::steady_clock::now());
    const int timeout =
        stopping ? 0 : static_cast<int>(std::clamp<int64_t>(left.count(), 0, tick_.count()));
    const int n = epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), timeout);
    if (n < 0 && errno != EINTR) {
      FERRY_LOG(kError) << "tcp epoll_wait: " << ErrnoText(errno);
    }
    for (int i = 0; i < n; ++i) {
      auto* handler = static_cast<IoHandler*>(events[i].data.ptr);
      if (handler == nullptr) {
        uint64_t count = 0;
        (void)!read(wake_.get(), &count, sizeof(count));
        continue;
      }
      if (handlers_.count(handler) != 0) handler->OnEvents(events[i].events);
    }
    graveyard_.clear();
    const TimePoint now = std::chrono::steady_clock::now();
    if (now >= next_tick) {
      Tick(now);
      graveyard_.clear();
      next_tick = now + tick_;
    }
  }
  ShutdownAll();
}

}  // namespace ferry::tcp
