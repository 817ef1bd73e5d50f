// Network namespaces for tests that break the network between two engines (tests/fault/).
//
//   auto pair = NetnsPair::Create("part");       // two namespaces joined by a veth pair
//   InNamespace in_a((*pair)->a());               // this thread (and threads it makes) in a
//   ... start a peer with (*pair)->ExecPrefix(NetnsPair::kB) + argv ...
//   IptablesRule drop((*pair)->b(), "INPUT -i " + (*pair)->veth_b() + " -j DROP");
//   drop.Remove();                                // heal
//
// Everything a test makes here is removed by destructors, even when the test fails: deleting a
// namespace takes its veth end, addresses, routes, iptables rules and qdiscs with it. Names carry
// the process id, so parallel test processes do not collide; the addresses (kAddressA/B) live
// inside the pair's namespaces only, so every pair can use the same ones.
// Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 and, for rules, iptables:
// NetworkFaultsUnsupported() says why a test should skip.
// Thread contract: each object is used by one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ferry/status.h"

namespace ferry::testing {

// Empty when this process can make namespaces, veth pairs, iptables rules and tc qdiscs;
// otherwise the reason (for GTEST_SKIP). Checked once per process.
std::string NetworkFaultsUnsupported();

// Runs `command` through /bin/sh inside namespace `ns` (ip netns exec). Internal naming the
// command and its output when it exits non-zero.
Status RunInNamespace(const std::string& ns, const std::string& command);
// As RunInNamespace, returning what the command printed (at most 64 KiB).
Result<std::string> OutputInNamespace(const std::string& ns, const std::string& command);

class NetnsPair {
 public:
  enum Side { kA, kB };
  static constexpr const char* kAddressA = "10.99.0.1";  // on veth_a(), in a()
  static constexpr const char* kAddressB = "10.99.0.2";  // on veth_b(), in b()

  // Makes "ferry-<tag><pid>a" and "...b", a veth pair between them with kAddressA/B (/24), and
  // brings every link up. Internal naming the failed command; nothing is left behind then.
  static Result<std::unique_ptr<NetnsPair>> Create(const std::string& tag);
  ~NetnsPair();  // deletes both namespaces
  NetnsPair(const NetnsPair&) = delete;
  NetnsPair& operator=(const NetnsPair&) = delete;

  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }
  const std::string& veth_a() const { return veth_a_; }
  const std::string& veth_b() const { return veth_b_; }
  const std::string& name(Side side) const { return side == kA ? a_ : b_; }
  // argv prefix that runs a program in the namespace: {"/usr/bin/env", "ip", "netns", "exec", ns}.
  std::vector<std::string> ExecPrefix(Side side) const;
  Status Run(Side side, const std::string& command) const { return RunInNamespace(name(side), command); }

 private:
  NetnsPair(std::string a, std::string b, std::string veth_a, std::string veth_b)
      : a_(std::move(a)), b_(std::move(b)), veth_a_(std::move(veth_a)), veth_b_(std::move(veth_b)) {}
  std::string a_, b_, veth_a_, veth_b_;
};

// Moves the calling thread into a named network namespace; back on destruction. Threads the
// calling thread makes meanwhile stay in the namespace for their life, and so do sockets made
// on them.
class InNamespace {
 public:
  explicit InNamespace(const std::string& name);
  ~InNamespace();
  InNamespace(const InNamespace&) = delete;
  InNamespace& operator=(const InNamespace&) = delete;
  bool ok() const { return ok_; }

 private:
  int home_ = -1;
  bool ok_ = false;
};

// One iptables rule in a namespace, inserted first in its chain on construction and deleted by
// Remove() or on destruction. `spec` is what follows -I / -D: "[-t nat] CHAIN match... -j TARGET".
// The rule carries a comment naming it, so that its packet counter can be read.
class IptablesRule {
 public:
  static Result<std::unique_ptr<IptablesRule>> Add(const std::string& ns, const std::string& spec);
  ~IptablesRule();
  IptablesRule(const IptablesRule&) = delete;
  IptablesRule& operator=(const IptablesRule&) = delete;
  Status Remove();  // idempotent
  // Packets the rule matched so far (what a DROP dropped). Internal when it cannot be read.
  Result<uint64_t> Packets() const;

 private:
  IptablesRule(std::string ns, std::string table, std::string chain, std::string rule,
               std::string tag)
      : ns_(std::move(ns)), table_(std::move(table)), chain_(std::move(chain)),
        rule_(std::move(rule)), tag_(std::move(tag)) {}
  std::string ns_, table_, chain_, rule_, tag_;
  bool removed_ = false;
};

}  // namespace ferry::testing
