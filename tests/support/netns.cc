#include "netns.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <sstream>

namespace ferry::testing {

namespace {

// Runs `command` through /bin/sh; its exit code, with stdout and stderr in `*output`.
int Shell(const std::string& command, std::string* output) {
  output->clear();
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  std::array<char, 512> chunk;
  size_t got = 0;
  while ((got = std::fread(chunk.data(), 1, chunk.size(), pipe)) > 0) {
    if (output->size() < (64 << 10)) output->append(chunk.data(), got);  // bounded
  }
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

Status RunShell(const std::string& command) {
  std::string output;
  const int rc = Shell(command, &output);
  if (rc == 0) return Status::Ok();
  while (!output.empty() && output.back() == '\n') output.pop_back();
  return InternalError("'" + command + "' exited " + std::to_string(rc) + ": " + output);
}

// Single quotes for /bin/sh.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

std::string NetworkFaultsUnsupported() {
  static std::once_flag once;
  static std::string reason;
  std::call_once(once, [] {
    if (::geteuid() != 0) {
      reason = "needs root (network namespaces, iptables, tc)";
      return;
    }
    std::string output;
    for (const char* tool : {"ip", "iptables", "tc"}) {
      if (Shell(std::string("command -v ") + tool, &output) != 0) {
        reason = std::string("needs '") + tool + "' (scripts/install-deps.sh installs it)";
        return;
      }
    }
    // The host's network may be something a container cannot change: try the real thing once.
    Result<std::unique_ptr<NetnsPair>> probe = NetnsPair::Create("probe");
    if (!probe.ok()) {
      reason = "cannot make network namespaces: " + probe.status().ToString();
      return;
    }
    Status rule = (*probe)->Run(NetnsPair::kB, "iptables -I INPUT -p tcp -j REJECT "
                                              "--reject-with tcp-reset && iptables -t nat -I "
                                              "PREROUTING -p tcp -j REDIRECT --to-ports 1");
    if (!rule.ok()) reason = "iptables does not work in a network namespace: " + rule.ToString();
  });
  return reason;
}

Status RunInNamespace(const std::string& ns, const std::string& command) {
  return OutputInNamespace(ns, command).status();
}

Result<std::string> OutputInNamespace(const std::string& ns, const std::string& command) {
  const std::string line = "ip netns exec " + Quote(ns) + " /bin/sh -c " + Quote(command);
  std::string output;
  const int rc = Shell(line, &output);
  if (rc == 0) return output;
  while (!output.empty() && output.back() == '\n') output.pop_back();
  return InternalError("'" + line + "' exited " + std::to_string(rc) + ": " + output);
}

Result<std::unique_ptr<NetnsPair>> NetnsPair::Create(const std::string& tag) {
  const std::string id = tag + std::to_string(::getpid());
  // Interface names are at most 15 bytes: "fv" + the last digits of the id + "a".
  const std::string short_id = id.size() > 11 ? id.substr(id.size() - 11) : id;
  std::unique_ptr<NetnsPair> pair(new NetnsPair("ferry-" + id + "a", "ferry-" + id + "b",
                                                "fv" + short_id + "a", "fv" + short_id + "b"));
  const std::string a = pair->a_, b = pair->b_;
  const std::string cmds[] = {
      "ip netns add " + a,
      "ip netns add " + b,
      "ip link add " + pair->veth_a_ + " netns " + a + " type veth peer name " + pair->veth_b_ +
          " netns " + b,
      "ip -n " + a + " addr add " + kAddressA + "/24 dev " + pair->veth_a_,
      "ip -n " + b + " addr add " + kAddressB + "/24 dev " + pair->veth_b_,
      "ip -n " + a + " link set " + pair->veth_a_ + " up",
      "ip -n " + b + " link set " + pair->veth_b_ + " up",
      "ip -n " + a + " link set lo up",
      "ip -n " + b + " link set lo up",
  };
  for (const std::string& c : cmds) RETURN_IF_ERROR(RunShell(c));  // ~NetnsPair cleans up
  return pair;
}

NetnsPair::~NetnsPair() {
  std::string ignored;
  Shell("ip netns del " + a_, &ignored);
  Shell("ip netns del " + b_, &ignored);
}

std::vector<std::string> NetnsPair::ExecPrefix(Side side) const {
  return {"/usr/bin/env", "ip", "netns", "exec", name(side)};
}

InNamespace::InNamespace(const std::string& name)
    : home_(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) {
  const int target = ::open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  ok_ = home_ >= 0 && target >= 0 && ::setns(target, CLONE_NEWNET) == 0;
  if (target >= 0) ::close(target);
}

InNamespace::~InNamespace() {
  if (ok_) ::setns(home_, CLONE_NEWNET);
  if (home_ >= 0) ::close(home_);
}

Result<std::unique_ptr<IptablesRule>> IptablesRule::Add(const std::string& ns,
                                                        const std::string& spec) {
  static std::atomic<int> next_tag{0};
  std::string table = "filter";
  std::string rule = spec;
  if (rule.rfind("-t ", 0) == 0) {
    const size_t end = rule.find(' ', 3);
    if (end == std::string::npos) return InvalidArgumentError("iptables rule '" + spec + "'");
    table = rule.substr(3, end - 3);
    rule = rule.substr(end + 1);
  }
  const std::string chain = rule.substr(0, rule.find(' '));
  const std::string tag = "ferry-test-" + std::to_string(::getpid()) + "-" +
                          std::to_string(next_tag.fetch_add(1));
  rule += " -m comment --comment " + tag;
  RETURN_IF_ERROR(RunInNamespace(ns, "iptables -w -t " + table + " -I " + rule));
  return std::unique_ptr<IptablesRule>(new IptablesRule(ns, table, chain, rule, tag));
}

IptablesRule::~IptablesRule() { Remove().IgnoreError(); }

Status IptablesRule::Remove() {
  if (removed_) return Status::Ok();
  removed_ = true;
  return RunInNamespace(ns_, "iptables -w -t " + table_ + " -D " + rule_);
}

Result<uint64_t> IptablesRule::Packets() const {
  ASSIGN_OR_RETURN(std::string listing,
                   OutputInNamespace(ns_, "iptables -w -t " + table_ + " -L " + chain_ + " -v -x -n"));
  std::istringstream lines(listing);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(tag_) == std::string::npos) continue;
    std::istringstream fields(line);
    uint64_t packets = 0;
    if (fields >> packets) return packets;
  }
  return InternalError("no counter for rule '" + rule_ + "' in:\n" + listing);
}

}  // namespace ferry::testing
