// ferry-raw-fabric-baseline: the ceiling ferry's rdma transport is measured against, in the same
// run. Plain libfabric (no ferry code), two processes, the same provider and the same FI_EP_RDM +
// FI_RMA setup as the transport (writes complete with FI_DELIVERY_COMPLETE where offered):
//
//   target:    ferry-raw-fabric-baseline --mode=target [--provider=tcp;ofi_rxm]
//                [--host=127.0.0.1] [--buffer_size=256M] [--duration=SECONDS]
//              registers its buffer and prints one line, then serves (drives the provider's
//              progress) until SIGINT/SIGTERM or --duration:
//                ready --addr=<hex> --key=<hex> --base=<hex> --len=<bytes> --virt=0|1
//   initiator: ferry-raw-fabric-baseline --mode=initiator <the ready line's flags>
//                [--provider=...] [--host=...] [--operation=write|read] [--block_size=64K]
//                [--inflight=32] [--duration=3]
//              keeps --inflight fi_write/fi_read of --block_size bytes in flight for --duration
//              seconds (block i goes to offset (i * block) mod len) and prints one JSON line:
//                {"operation":"write","block_size":65536,"inflight":32,"gbps":...,
//                 "ops_per_s":...,"bytes":...,"seconds":...,"p50_us":...,"p99_us":...,
//                 "mean_us":...}
//
// gbps is 10^9 bytes per second of completed operations. p50/p99/mean are per operation, from
// its post until this process read its completion from the CQ; with --inflight=1 that is the
// raw round trip of one write (delivery-complete where offered) or read, as ferry-bench's
// latency mode (--batch_size=1 --inflight=1) measures one ferry write or read. Exit status 1 on
// any libfabric error.
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "raw_baseline.h"

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};
void OnSignal(int /*signal*/) { g_stop.store(true); }

struct Options {
  bool target = false;
  bool write = true;
  std::string provider = "tcp;ofi_rxm";
  std::string host = "127.0.0.1";
  uint64_t buffer_size = uint64_t{256} << 20;
  uint64_t block_size = 65536;
  uint64_t inflight = 32;
  double duration_s = 0;  // 0: target serves until a signal; initiator uses 3
  // The target's ready line.
  std::string addr;
  uint64_t key = 0;
  uint64_t base = 0;
  uint64_t len = 0;
  bool virt = false;
};

using raw_baseline::ParseBytes;

std::optional<uint64_t> ParseHex(std::string_view text) {
  uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string Hex(const void* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    const auto b = static_cast<const unsigned char*>(data)[i];
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

std::optional<std::string> Unhex(std::string_view text) {
  if (text.size() % 2 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < text.size(); i += 2) {
    const auto byte = ParseHex(text.substr(i, 2));
    if (!byte) return std::nullopt;
    out.push_back(static_cast<char>(*byte));
  }
  return out;
}

bool Apply(std::string_view flag, std::string_view v, Options& o) {
  if (flag == "mode") {
    if (v != "target" && v != "initiator") return false;
    o.target = v == "target";
  } else if (flag == "operation") {
    if (v != "write" && v != "read") return false;
    o.write = v == "write";
  } else if (flag == "provider" || flag == "host") {
    if (v.empty()) return false;
    (flag == "provider" ? o.provider : o.host) = std::string(v);
  } else if (flag == "buffer_size" || flag == "block_size" || flag == "len") {
    const auto bytes = ParseBytes(v);
    if (!bytes) return false;
    (flag == "buffer_size" ? o.buffer_size : flag == "block_size" ? o.block_size : o.len) = *bytes;
  } else if (flag == "inflight") {
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), o.inflight);
    if (ec != std::errc() || ptr != v.data() + v.size() || o.inflight < 1 || o.inflight > 4096) {
      return false;
    }
  } else if (flag == "duration") {
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), o.duration_s);
    if (ec != std::errc() || ptr != v.data() + v.size() || !(o.duration_s > 0)) return false;
  } else if (flag == "addr") {
    const auto bytes = Unhex(v);
    if (!bytes || bytes->empty()) return false;
    o.addr = *bytes;
  } else if (flag == "key" || flag == "base") {
    const auto n = ParseHex(v);
    if (!n) return false;
    (flag == "key" ? o.key : o.base) = *n;
  } else if (flag == "virt") {
    if (v != "0" && v != "1") return false;
    o.virt = v == "1";
  } else {
    return false;
  }
  return true;
}

std::optional<Options> ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string_view::npos ||
        !Apply(arg.substr(2, eq - 2), arg.substr(eq + 1), o)) {
      std::fprintf(stderr, "bad argument '%s' (see the comment at the top of %s)\n", argv[i],
                   __FILE__);
      return std::nullopt;
    }
  }
  if (!o.target && (o.addr.empty() || o.len == 0 || o.len < o.block_size)) {
    std::fprintf(stderr, "initiator: pass the target's ready line flags (len >= block_size)\n");
    return std::nullopt;
  }
  return o;
}

bool Check(int rc, const char* what) {
  if (rc == 0) return true;
  std::fprintf(stderr, "%s: %s (%d)\n", what, fi_strerror(rc < 0 ? -rc : rc), rc);
  return false;
}

// One endpoint with its CQ and AV, set up as ferry's rdma transport sets up its own.
struct Fabric {
  fi_info* info = nullptr;
  fid_fabric* fabric = nullptr;
  fid_domain* domain = nullptr;
  fid_av* av = nullptr;
  fid_cq* cq = nullptr;
  fid_ep* ep = nullptr;
  int wait_fd = -1;
  uint64_t write_flags = 0;

  ~Fabric() {
    if (ep) fi_close(&ep->fid);
    if (cq) fi_close(&cq->fid);
    if (av) fi_close(&av->fid);
    if (domain) fi_close(&domain->fid);
    if (fabric) fi_close(&fabric->fid);
    if (info) fi_freeinfo(info);
  }

  bool Open(const Options& o) {
    fi_info* hints = fi_allocinfo();
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    hints->fabric_attr->prov_name = strdup(o.provider.c_str());
    const std::string core = o.provider.substr(0, o.provider.find(';'));
    if (core == "tcp" || core == "sockets" || core == "udp") {
      addrinfo want{};
      want.ai_flags = AI_NUMERICHOST;
      addrinfo* found = nullptr;
      if (getaddrinfo(o.host.c_str(), nullptr, &want, &found) != 0 || found == nullptr) {
        std::fprintf(stderr, "bad --host '%s'\n", o.host.c_str());
        fi_freeinfo(hints);
        return false;
      }
      hints->addr_format = found->ai_family == AF_INET6 ? FI_SOCKADDR_IN6 : FI_SOCKADDR_IN;
      hints->src_addr = std::malloc(found->ai_addrlen);
      std::memcpy(hints->src_addr, found->ai_addr, found->ai_addrlen);
      hints->src_addrlen = found->ai_addrlen;
      freeaddrinfo(found);
    }
    int rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
    if (rc == -FI_ENODATA) {
      hints->tx_attr->op_flags = 0;
      rc = fi_getinfo(FI_VERSION(1, 17), nullptr, nullptr, 0, hints, &info);
    }
    fi_freeinfo(hints);
    if (!Check(rc, "fi_getinfo")) return false;
    if (info->tx_attr->op_flags & FI_DELIVERY_COMPLETE) write_flags = FI_DELIVERY_COMPLETE;
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    cq_attr.size = 4096;
    cq_attr.wait_obj = FI_WAIT_FD;
    if (!Check(fi_fabric(info->fabric_attr, &fabric, nullptr), "fi_fabric") ||
        !Check(fi_domain(fabric, info, &domain, nullptr), "fi_domain") ||
        !Check(fi_av_open(domain, &av_attr, &av, nullptr), "fi_av_open")) {
      return false;
    }
    if (fi_cq_open(domain, &cq_attr, &cq, nullptr) != 0) {
      cq_attr.wait_obj = FI_WAIT_NONE;
      if (!Check(fi_cq_open(domain, &cq_attr, &cq, nullptr), "fi_cq_open")) return false;
    } else if (fi_control(&cq->fid, FI_GETWAIT, &wait_fd) != 0) {
      wait_fd = -1;
    }
    return Check(fi_endpoint(domain, info, &ep, nullptr), "fi_endpoint") &&
           Check(fi_ep_bind(ep, &av->fid, 0), "fi_ep_bind(av)") &&
           Check(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)") &&
           Check(fi_enable(ep), "fi_enable");
  }

  // Sleeps until the CQ may have something (or `ms` passed), as ferry's progress thread does.
  void Wait(int ms) {
    fid* fids[1] = {&cq->fid};
    if (wait_fd < 0 || fi_trywait(fabric, fids, 1) != FI_SUCCESS) return;
    pollfd p{wait_fd, POLLIN, 0};
    (void)poll(&p, 1, ms);
  }
};

int RunTarget(const Options& o) {
  Fabric f;
  if (!f.Open(o)) return 1;
  std::vector<char> buffer(o.buffer_size, 1);
  fid_mr* mr = nullptr;
  if (!Check(fi_mr_reg(f.domain, buffer.data(), buffer.size(), FI_REMOTE_READ | FI_REMOTE_WRITE, 0,
                       1, 0, &mr, nullptr),
             "fi_mr_reg")) {
    return 1;
  }
  char name[256];
  size_t length = sizeof(name);
  if (!Check(fi_getname(&f.ep->fid, name, &length), "fi_getname")) return 1;
  std::printf("ready --addr=%s --key=%llx --base=%llx --len=%llu --virt=%d\n",
              Hex(name, length).c_str(), static_cast<unsigned long long>(fi_mr_key(mr)),
              static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(buffer.data())),
              static_cast<unsigned long long>(buffer.size()),
              (f.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? 1 : 0);
  std::fflush(stdout);
  const auto end = Clock::now() + std::chrono::duration<double>(o.duration_s);
  while (!g_stop.load() && (o.duration_s == 0 || Clock::now() < end)) {
    fi_cq_entry entries[16];
    if (fi_cq_read(f.cq, entries, 16) == -FI_EAGAIN) f.Wait(100);  // drives progress
  }
  fi_close(&mr->fid);
  return 0;
}

int RunInitiator(const Options& o) {
  Fabric f;
  if (!f.Open(o)) return 1;
  fi_addr_t peer = FI_ADDR_UNSPEC;
  if (fi_av_insert(f.av, o.addr.data(), 1, &peer, 0, nullptr) != 1) {
    std::fprintf(stderr, "fi_av_insert failed\n");
    return 1;
  }
  std::vector<char> local(o.block_size * o.inflight, 2);
  fid_mr* mr = nullptr;
  if (!Check(fi_mr_reg(f.domain, local.data(), local.size(), FI_READ | FI_WRITE, 0, 2, 0, &mr,
                       nullptr),
             "fi_mr_reg")) {
    return 1;
  }
  void* desc = fi_mr_desc(mr);
  std::vector<fi_context2> contexts(o.inflight);
  std::vector<Clock::time_point> posted_at(o.inflight);
  std::vector<double> latencies_us;  // of the operations completed while measuring
  const uint64_t blocks = o.len / o.block_size;
  uint64_t next = 0;
  uint64_t done = 0;
  uint64_t posted = 0;
  std::vector<uint64_t> free_slots;
  for (uint64_t i = 0; i < o.inflight; ++i) free_slots.push_back(o.inflight - 1 - i);
  auto post = [&](uint64_t slot) {
    const uint64_t offset = (next % blocks) * o.block_size;
    iovec iov{local.data() + slot * o.block_size, o.block_size};
    fi_rma_iov rma{(o.virt ? o.base : 0) + offset, o.block_size, o.key};
    fi_msg_rma msg{};
    msg.msg_iov = &iov;
    msg.desc = &desc;
    msg.iov_count = 1;
    msg.addr = peer;
    msg.rma_iov = &rma;
    msg.rma_iov_count = 1;
    msg.context = &contexts[slot];
    const ssize_t rc = o.write ? fi_writemsg(f.ep, &msg, FI_COMPLETION | f.write_flags)
                               : fi_readmsg(f.ep, &msg, FI_COMPLETION);
    if (rc == 0) {
      ++next;
      posted_at[slot] = Clock::now();
    }
    return rc;
  };
  const auto duration = std::chrono::duration<double>(o.duration_s > 0 ? o.duration_s : 3);
  Clock::time_point start{};
  Clock::time_point end{};
  bool measuring = false;
  uint64_t counted = 0;
  const auto warmup_end = Clock::now() + std::chrono::seconds(10);  // connection set-up bound
  while (true) {
    const Clock::time_point now = Clock::now();
    if (!measuring && done > 0) {  // the first completion: the connection is up
      measuring = true;
      start = now;
      end = start + std::chrono::duration_cast<Clock::duration>(duration);
      counted = done;
    }
    if (measuring && now >= end) break;
    if (!measuring && now >= warmup_end) {
      std::fprintf(stderr, "no completion within 10 s\n");
      return 1;
    }
    while (!free_slots.empty()) {
      const ssize_t rc = post(free_slots.back());
      if (rc == -FI_EAGAIN) break;
      if (rc != 0) {
        Check(static_cast<int>(rc), "fi_writemsg/fi_readmsg");
        return 1;
      }
      free_slots.pop_back();
      ++posted;
    }
    fi_cq_entry entries[64];
    const ssize_t n = fi_cq_read(f.cq, entries, 64);
    if (n > 0) {
      const Clock::time_point completed = Clock::now();
      for (ssize_t i = 0; i < n; ++i) {
        const auto slot = static_cast<uint64_t>(static_cast<fi_context2*>(entries[i].op_context) -
                                                contexts.data());
        free_slots.push_back(slot);
        if (measuring) {
          latencies_us.push_back(
              std::chrono::duration<double, std::micro>(completed - posted_at[slot]).count());
        }
      }
      done += static_cast<uint64_t>(n);
    } else if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      fi_cq_readerr(f.cq, &err, 0);
      std::fprintf(stderr, "completion error: %s\n", fi_strerror(err.err));
      return 1;
    } else if (free_slots.empty()) {
      f.Wait(5);
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const uint64_t ops = done - counted;
  const double bytes = static_cast<double>(ops) * static_cast<double>(o.block_size);
  double sum_us = 0;
  for (const double us : latencies_us) sum_us += us;
  const double mean_us =
      latencies_us.empty() ? 0 : sum_us / static_cast<double>(latencies_us.size());
  std::sort(latencies_us.begin(), latencies_us.end());
  auto percentile = [&](double p) {
    if (latencies_us.empty()) return 0.0;
    const auto rank =
        static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(latencies_us.size())));
    return latencies_us[std::min(latencies_us.size(), std::max<size_t>(rank, 1)) - 1];
  };
  std::printf(
      "{\"operation\":\"%s\",\"block_size\":%llu,\"inflight\":%llu,\"gbps\":%.6f,"
      "\"ops_per_s\":%.1f,\"bytes\":%.0f,\"seconds\":%.6f,\"p50_us\":%.1f,\"p99_us\":%.1f,"
      "\"mean_us\":%.1f}\n",
      o.write ? "write" : "read", static_cast<unsigned long long>(o.block_size),
      static_cast<unsigned long long>(o.inflight), bytes / seconds / 1e9, ops / seconds, bytes,
      seconds, percentile(50), percentile(99), mean_us);
  // Let what is still in flight finish before the buffers go.
  const auto drain_end = Clock::now() + std::chrono::seconds(5);
  while (done < posted && Clock::now() < drain_end) {
    fi_cq_entry entries[64];
    const ssize_t n = fi_cq_read(f.cq, entries, 64);
    if (n > 0) done += static_cast<uint64_t>(n);
    if (n == -FI_EAVAIL) break;
  }
  fi_close(&f.ep->fid);
  f.ep = nullptr;
  fi_close(&mr->fid);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Options> options = ParseArgs(argc, argv);
  if (!options) return 2;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  return options->target ? RunTarget(*options) : RunInitiator(*options);
}
