// TargetServer: the tcp transport's listener. It accepts data connections and hands each to a
// TargetConnection on one of the runtime's loops (round-robin). Connections beyond
// options.max_target_connections are closed at once. When the process runs out of descriptors
// it stops accepting for one tick instead of spinning.
//
// Thread contract: Start is thread-safe; the IoHandler methods run on the listener's loop thread.
#pragma once

#include <cstdint>
#include <memory>

#include "transport/tcp/io_loop.h"
#include "transport/tcp/tcp_socket.h"

namespace ferry::tcp {

struct TcpRuntime;

class TargetServer final : public IoHandler, public std::enable_shared_from_this<TargetServer> {
 public:
  // Takes `listener`, a listening non-blocking socket.
  TargetServer(std::shared_ptr<TcpRuntime> runtime, IoLoop* loop, UniqueFd listener);

  // Posts the registration to the loop. False when the loop is stopping.
  bool Start();

  void OnEvents(uint32_t events) override;
  void OnTick(TimePoint now) override;
  void Shutdown(const Status& why) override;

 private:
  void Register();
  void Serve(UniqueFd fd, const std::string& peer);

  const std::shared_ptr<TcpRuntime> runtime_;
  IoLoop* const loop_;
  UniqueFd listener_;
  // Loop thread only.
  bool paused_ = false;
};

}  // namespace ferry::tcp
