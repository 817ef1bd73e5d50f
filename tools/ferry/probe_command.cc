// `ferry probe` (commands.h): asks the segment's engine, at the RPC endpoint its descriptor
// names, who it is (the engine's kProbe RPC, rpc/messages.h), and times the round trip. The
// engine is alive when it answers as the segment and incarnation the store describes; an
// answer from another incarnation means the engine restarted and its new descriptor is not
// published yet (or the store holds a stale one).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "common/env.h"
#include "common/host_port.h"
#include "rpc/messages.h"
#include "rpc/rpc_client.h"
#include "segment_view.h"
#include "store_access.h"
#include "text_table.h"

namespace ferry::cli {

int RunProbe(const StoreFlags& flags, const std::string& segment, const ProbeFlags& probe) {
  SegmentDesc desc;
  if (const int code = LoadSegment(flags, segment, &desc); code != kExitOk) return code;
  const HostPort peer{desc.rpc.host, desc.rpc.port};
  // What reaches the terminal from the store or the peer is made Printable.
  const std::string who = Printable(segment) + " at " + Printable(peer.ToString());
  // Engines that share a cluster secret (FERRY_AUTH_SECRET) answer only a client that proves it.
  RpcClient client(RpcClientOptions{.auth_secret = GetFerryEnv("AUTH_SECRET").value_or("")});

  std::vector<double> rtts_ms;
  int failures = 0;
  for (int i = 0; i < probe.count; ++i) {
    if (i > 0) std::this_thread::sleep_for(probe.interval);  // a command's pacing, not a test
    const auto start = std::chrono::steady_clock::now();
    Result<std::string> reply = client.Call(peer, ToWire(RpcType::kProbe), "", flags.timeout);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!reply.ok()) {
      ++failures;
      std::printf("%s: no answer after %.3f ms: %s\n", who.c_str(), ms,
                  Printable(reply.status().message()).c_str());
      std::fflush(stdout);
      continue;
    }
    Result<ProbeResponse> answer = UnpackProbeResponse(*reply);
    if (!answer.ok()) {
      ++failures;
      std::printf("%s: bad probe answer: %s\n", who.c_str(),
                  Printable(answer.status().message()).c_str());
    } else if (answer->name != desc.name || answer->incarnation != desc.incarnation) {
      ++failures;
      std::printf(
          "%s: answered as '%s' incarnation %llu, not incarnation %llu the store "
          "describes (restarted, or a stale descriptor), rtt %.3f ms\n",
          who.c_str(), Printable(answer->name).c_str(),
          static_cast<unsigned long long>(answer->incarnation),
          static_cast<unsigned long long>(desc.incarnation), ms);
    } else {
      rtts_ms.push_back(ms);
      std::printf("%s: alive, incarnation %llu, rtt %.3f ms\n", who.c_str(),
                  static_cast<unsigned long long>(answer->incarnation), ms);
    }
    std::fflush(stdout);
  }
  if (probe.count > 1) {
    std::printf("%d probes, %zu alive, %d failed", probe.count, rtts_ms.size(), failures);
    if (!rtts_ms.empty()) {
      double sum = 0;
      for (double ms : rtts_ms) sum += ms;
      std::printf("; rtt min/avg/max %.3f/%.3f/%.3f ms",
                  *std::min_element(rtts_ms.begin(), rtts_ms.end()),
                  sum / static_cast<double>(rtts_ms.size()),
                  *std::max_element(rtts_ms.begin(), rtts_ms.end()));
    }
    std::printf("\n");
  }
  return failures == 0 ? kExitOk : kExitNoAnswer;
}

}  // namespace ferry::cli
