// IoLoop: one I/O thread of the tcp transport. It owns an epoll set of handlers (data
// connections, the listener), runs tasks posted from other threads, and calls every handler's
// OnTick about once per tick so each can enforce its own I/O timeout. The loop never blocks on a
// peer: sockets are non-blocking and the only wait is epoll_wait, bounded by the tick.
//
// Thread contract: Post, RequestStop, Join and Stop are thread-safe; Watch, Modify and Unwatch
// are called on the loop thread only (from a handler or a posted task).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "ferry/status.h"
#include "transport/tcp/tcp_socket.h"

namespace ferry::tcp {

using TimePoint = std::chrono::steady_clock::time_point;

// Something an IoLoop watches. Every method runs on the loop's thread.
class IoHandler {
 public:
  virtual ~IoHandler() = default;
  // `events`: the epoll mask that fired (EPOLLIN, EPOLLOUT, EPOLLERR, EPOLLHUP).
  virtual void OnEvents(uint32_t events) = 0;
  // Runs about once per tick; enforces the handler's own timeouts.
  virtual void OnTick(TimePoint now) = 0;
  // The loop is stopping: close for good, failing whatever is held with `why`. Idempotent.
  virtual void Shutdown(const Status& why) = 0;
};

class IoLoop {
 public:
  using Task = std::function<void()>;

  // Starts the loop thread; handlers' OnTick runs about every `tick`. Internal when the OS
  // refuses an epoll set, an eventfd or a thread.
  static Result<std::unique_ptr<IoLoop>> Create(std::chrono::milliseconds tick);
  // Stops and joins (see Stop). Must not run on the loop thread.
  ~IoLoop();
  IoLoop(const IoLoop&) = delete;
  IoLoop& operator=(const IoLoop&) = delete;

  // Queues `task` for the loop thread. False (the task is dropped) once stopping began.
  // A task must not throw.
  bool Post(Task task);

  // Begins stopping: no task is accepted afterwards; the thread runs the tasks already queued,
  // then calls Shutdown(why) on every handler and exits. Idempotent; does not wait.
  void RequestStop(const Status& why);
  // Waits for the thread to exit. Must not run on the loop thread. Idempotent.
  void Join();
  void Stop(const Status& why) {
    RequestStop(why);
    Join();
  }

  // Loop thread only. Watches `fd` for `events` (EPOLLIN / EPOLLOUT) on behalf of `handler`;
  // the loop keeps `handler` alive until Unwatch. Internal when epoll refuses.
  Status Watch(std::shared_ptr<IoHandler> handler, int fd, uint32_t events);
  // Loop thread only. Changes the events watched for a watched handler.
  void Modify(IoHandler* handler, int fd, uint32_t events);
  // Loop thread only. Stops watching; events already reported for `handler` are dropped, and it
  // stays alive until the current loop iteration ends. Call before closing `fd`.
  void Unwatch(IoHandler* handler, int fd);

 private:
  IoLoop(UniqueFd epoll, UniqueFd wake, std::chrono::milliseconds tick);
  void Run();
  // Runs the queued tasks; returns whether there were any. `*stopping`: stopping has begun.
  bool RunTasks(bool* stopping);
  void Tick(TimePoint now);
  void ShutdownAll();

  const UniqueFd epoll_;
  const UniqueFd wake_;  // eventfd
  const std::chrono::milliseconds tick_;

  Mutex mu_;
  std::vector<Task> inbox_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  Status stop_reason_ GUARDED_BY(mu_);

  // Loop thread only.
  std::unordered_map<IoHandler*, std::shared_ptr<IoHandler>> handlers_;
  std::vector<std::shared_ptr<IoHandler>> graveyard_;  // unwatched this iteration

  Mutex join_mu_;
  std::thread thread_;  // started in Create, joined under join_mu_
};

}  // namespace ferry::tcp
