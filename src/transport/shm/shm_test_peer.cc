// shm_test_peer: a second process for shm_process_test. It runs a started ShmTransport with a
// TestContext as its engine and answers one command per stdin line with one stdout line:
//   alloc <length> shared|heap   -> "region <addr> <key>"  (registered, generation 1, zeroed)
//   pattern <addr> <len> <seed>  -> "ok"                    (fills with shm_test_pattern)
//   memset <addr> <len> <byte>   -> "ok"
//   hash <addr> <len>            -> "hash <fnv1a-64>"
//   check <addr> <len> <byte>    -> "ok" | "bad <offset>"
//   close <addr>                 -> "ok" | "none"           (the registry's unregister step 1)
//   waitnopins <ms>              -> "ok" | "timeout"
//   nodump                       -> "ok" | "error <errno>"  (prctl PR_SET_DUMPABLE 0)
//   ptracer                      -> "ptracer 0|1"  (whether Start asked for PR_SET_PTRACER_ANY)
//   hold <socket> <addr> <len> <incarnation> <generation> [<byte>]
//                                -> "held" | "refused <status>"
//       as an initiator of another target: a grant connection to <socket> asks for the range
//       (Acquire, Release), then pins it through the target's lease table (TryPin) and keeps
//       the pin (and the connection) until quit; with <byte>, writes the range full of it with
//       process_vm_writev under that pin first.
//   quit                         -> "bye", then exits 0
// At start it prints "ready <incarnation> <published shm bytes>". argv[1]: the socket dir;
// argv[2] "noptrace" (optional): ShmTransportOptions::allow_same_user_ptrace = false.
#include <sys/prctl.h>
#include <sys/uio.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "transport/conformance/test_context.h"
#include "transport/samehost/grant_channel.h"
#include "transport/shm/shm_test_pattern.h"
#include "transport/shm/shm_transport.h"

namespace ferry {
namespace {

constexpr uint64_t kIncarnation = 0x5eed;

uint8_t* Ptr(uint64_t addr) { return reinterpret_cast<uint8_t*>(addr); }

class Peer {
 public:
  Peer(std::string dir, bool allow_ptrace) : ctx_(kIncarnation) {
    ShmTransportOptions options;
    options.socket_dir = std::move(dir);
    options.allow_same_user_ptrace = allow_ptrace;
    transport_ = std::make_unique<ShmTransport>(options);
  }
  ~Peer() {
    transport_->Stop();
    for (void* p : shared_) transport_->FreeShared(p).IgnoreError();
  }

  bool Start() {
    Result<std::string> published = transport_->Start(&ctx_, {"peer", "127.0.0.1"});
    if (!published.ok()) {
      std::cout << "error " << published.status() << std::endl;
      return false;
    }
    std::cout << "ready " << kIncarnation << " " << *published << std::endl;
    return true;
  }

  // One command; false for quit.
  bool Handle(const std::string& line) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    uint64_t a = 0, b = 0, c = 0;
    if (cmd == "alloc") {
      std::string kind;
      in >> a >> kind;
      Alloc(a, kind == "shared");
    } else if (cmd == "pattern" && (in >> a >> b >> c)) {
      shm_test::FillPattern(Ptr(a), b, static_cast<uint32_t>(c));
      std::cout << "ok" << std::endl;
    } else if (cmd == "memset" && (in >> a >> b >> c)) {
      std::memset(Ptr(a), static_cast<int>(c), b);
      std::cout << "ok" << std::endl;
    } else if (cmd == "hash" && (in >> a >> b)) {
      std::cout << "hash " << shm_test::Fnv1a(Ptr(a), b) << std::endl;
    } else if (cmd == "check" && (in >> a >> b >> c)) {
      Check(Ptr(a), b, static_cast<uint8_t>(c));
    } else if (cmd == "close" && (in >> a)) {
      std::cout << (ctx_.CloseRegion(Ptr(a)) ? "ok" : "none") << std::endl;
    } else if (cmd == "waitnopins" && (in >> a)) {
      const bool drained = ctx_.WaitNoPins(std::chrono::milliseconds(a));
      std::cout << (drained ? "ok" : "timeout") << std::endl;
    } else if (cmd == "nodump") {
      const bool done = ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0;
      std::cout << (done ? "ok" : "error " + std::to_string(errno)) << std::endl;
    } else if (cmd == "ptracer") {
      std::cout << "ptracer " << (transport_->stats().same_user_ptrace_requested ? 1 : 0)
                << std::endl;
    } else if (cmd == "hold") {
      Hold(in);
    } else if (cmd == "quit") {
      std::cout << "bye" << std::endl;
      return false;
    } else {
      std::cout << "unknown " << line << std::endl;
    }
    return true;
  }

 private:
  void Alloc(uint64_t length, bool shared) {
    uint8_t* p = nullptr;
    if (shared) {
      Result<void*> memory = transport_->AllocateShared(length, Location::Cpu());
      if (!memory.ok()) {
        std::cout << "error " << memory.status() << std::endl;
        return;
      }
      p = static_cast<uint8_t*>(*memory);
      shared_.push_back(p);
    } else {
      heap_.push_back(std::make_unique<uint8_t[]>(length));
      p = heap_.back().get();
    }
    std::memset(p, 0, length);
    const auto addr = reinterpret_cast<uint64_t>(p);
    Result<std::string> key =
        transport_->RegisterMemory(addr, length, Location::Cpu(), MemoryAccess::kRemote);
    if (!key.ok()) {
      std::cout << "error " << key.status() << std::endl;
      return;
    }
    ctx_.AddRegion(p, length, 1, true, "shm");
    std::cout << "region " << addr << " " << *key << std::endl;
  }

  void Hold(std::istringstream& in) {
    std::string socket;
    samehost::RangeRequest range;
    if (!(in >> socket >> range.addr >> range.length >> range.incarnation >> range.generation)) {
      std::cout << "refused bad arguments" << std::endl;
      return;
    }
    int byte = -1;
    in >> byte;
    Result<std::unique_ptr<samehost::GrantConnection>> connection =
        samehost::GrantConnection::Connect(socket, std::chrono::seconds(5));
    if (!connection.ok()) {
      std::cout << "refused " << connection.status() << std::endl;
      return;
    }
    std::vector<Status> answers;
    Status asked = (*connection)->Acquire({&range, 1}, &answers, std::chrono::seconds(5));
    if (asked.ok()) asked = answers[0];
    (void)(*connection)->Release();
    if (!asked.ok()) {
      std::cout << "refused " << asked << std::endl;
      return;
    }
    if (!(*connection)->TryPin(range)) {
      std::cout << "refused no pin through the lease table" << std::endl;
      return;
    }
    if (byte >= 0) {
      std::vector<uint8_t> bytes(range.length, static_cast<uint8_t>(byte));
      iovec local{bytes.data(), bytes.size()};
      iovec remote{Ptr(range.addr), bytes.size()};
      if (::process_vm_writev((*connection)->peer_pid(), &local, 1, &remote, 1, 0) !=
          static_cast<ssize_t>(bytes.size())) {
        std::cout << "refused process_vm_writev: " << std::strerror(errno) << std::endl;
        return;
      }
    }
    held_.push_back(std::move(connection).value());
    std::cout << "held" << std::endl;
  }

  void Check(const uint8_t* p, uint64_t length, uint8_t byte) {
    for (uint64_t i = 0; i < length; ++i) {
      if (p[i] != byte) {
        std::cout << "bad " << i << std::endl;
        return;
      }
    }
    std::cout << "ok" << std::endl;
  }

  transport_testing::TestContext ctx_;
  std::unique_ptr<ShmTransport> transport_;
  std::vector<void*> shared_;
  std::vector<std::unique_ptr<uint8_t[]>> heap_;
  std::vector<std::unique_ptr<samehost::GrantConnection>> held_;  // "hold": pins kept
};

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  const bool noptrace = argc == 3 && std::string(argv[2]) == "noptrace";
  if (argc != 2 && !noptrace) {
    std::cerr << "usage: shm_test_peer <socket dir> [noptrace]" << std::endl;
    return 2;
  }
  ferry::Peer peer(argv[1], !noptrace);
  if (!peer.Start()) return 1;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!peer.Handle(line)) break;
  }
  return 0;
}
