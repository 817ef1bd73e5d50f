// RdmaTransport over libfabric's tcp;ofi_rxm provider on 127.0.0.1: lifecycle, what it
// publishes, data movement, many operations in flight and per-slice validation. Failure handling
// (stale keys, dead and unresponsive peers, Stop) is in rdma_fault_test.cc.
#include "transport/rdma/rdma_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <atomic>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "transport/rdma/fabric_info.h"
#include "transport/rdma/rdma_test_fixture.h"
#include "transport/rdma/rdma_wire.h"

namespace ferry::rdma {
namespace {

TEST_F(RdmaTransportTest, DescribesItselfAndKeepsLifecycleRules) {
  RdmaTransport rdma(TcpOptions());
  EXPECT_EQ(rdma.name(), "rdma");
  EXPECT_TRUE(rdma.capabilities().reaches_other_hosts);
  EXPECT_FALSE(rdma.capabilities().reaches_device_memory);
  EXPECT_EQ(rdma.capabilities().preferred_slice_size, kNicSliceSize);  // no provider yet
  EXPECT_EQ(rdma.RegisterMemory(Addr(local_.data()), 64, Location::Cpu(), MemoryAccess::kRemote)
                .status()
                .code(),
            StatusCode::kBusy);
  EXPECT_EQ(rdma.Connect(SegmentDesc{}).status().code(), StatusCode::kBusy);
  EXPECT_EQ(rdma.OnExchange("x").status().code(), StatusCode::kBusy);

  Result<std::string> published = rdma.Start(&target_ctx_, {"a", "127.0.0.1"});
  ASSERT_TRUE(published.ok()) << published.status();
  EXPECT_EQ(rdma.provider(), "tcp;ofi_rxm");
  // Slices follow the provider: a software one pays per operation, a NIC stripes small ones.
  EXPECT_EQ(rdma.capabilities().preferred_slice_size, kSoftwareSliceSize);
  EXPECT_EQ(rdma.capabilities().max_slice_size, UINT64_MAX);  // Submit splits at max_msg_size
  for (const char* software : {"tcp;ofi_rxm", "tcp", "sockets", "udp;ofi_rxd", "shm", "sm2"}) {
    EXPECT_EQ(PreferredSliceSize(software), kSoftwareSliceSize) << software;
  }
  for (const char* nic : {"verbs;ofi_rxm", "efa", "psm3", "cxi", "opx"}) {
    EXPECT_EQ(PreferredSliceSize(nic), kNicSliceSize) << nic;
  }
  EXPECT_EQ(rdma.Start(&target_ctx_, {"a", "127.0.0.1"}).status().code(), StatusCode::kBusy);
  EXPECT_EQ(rdma.RegisterMemory(1, 64, Location::Cuda(0), MemoryAccess::kRemote).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(rdma.RegisterMemory(Addr(local_.data()), 0, Location::Cpu(), MemoryAccess::kRemote)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(rdma.UnregisterMemory(Addr(local_.data()), 64).code(), StatusCode::kNotFound);
  ASSERT_TRUE(
      rdma.RegisterMemory(Addr(local_.data()), 64, Location::Cpu(), MemoryAccess::kRemote).ok());
  EXPECT_EQ(rdma.RegisterMemory(Addr(local_.data()), 64, Location::Cpu(), MemoryAccess::kRemote)
                .status()
                .code(),
            StatusCode::kAlreadyExists);
  EXPECT_TRUE(rdma.UnregisterMemory(Addr(local_.data()), 64).ok());
  EXPECT_EQ(rdma.OnExchange("not a check").status().code(), StatusCode::kInvalidArgument);
  rdma.Stop();
  rdma.Stop();
  EXPECT_EQ(rdma.Start(&target_ctx_, {"a", "127.0.0.1"}).status().code(), StatusCode::kBusy);
  EXPECT_EQ(rdma.OnExchange("x").status().code(), StatusCode::kCanceled);

  RdmaTransportOptions bad = TcpOptions();
  bad.max_inflight = 0;
  EXPECT_EQ(RdmaTransport(bad).Start(&target_ctx_, {"a", "127.0.0.1"}).status().code(),
            StatusCode::kInvalidArgument);
  bad = TcpOptions();
  bad.provider = "no-such-provider";
  EXPECT_EQ(ProbeRdmaProvider(bad).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(RdmaTransport(bad).Start(&target_ctx_, {"a", "127.0.0.1"}).status().code(),
            StatusCode::kUnavailable);
}

// Whether libfabric offers `provider` with FI_HMEM and RMA, asked directly (the oracle for what
// the transport must have negotiated).
bool ProviderOffersHmem(const std::string& provider) {
  fi_info* hints = fi_allocinfo();
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_HMEM;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_HMEM;
  hints->fabric_attr->prov_name = strdup(provider.c_str());
  fi_info* found = nullptr;
  const int rc = fi_getinfo(kFiVersion, nullptr, nullptr, 0, hints, &found);
  fi_freeinfo(hints);
  if (found != nullptr) fi_freeinfo(found);
  return rc == 0;
}

// Device memory follows FI_HMEM: without it (tcp;ofi_rxm here, or not asked) rdma refuses
// device memory with NotFound naming why, so the engine plans it elsewhere; with it (shm here)
// the transport says so, reaches device memory, and a device this libfabric cannot register is
// NotFound too (naming the provider's error), while host memory still moves.
TEST_F(RdmaTransportTest, DeviceMemoryFollowsFiHmem) {
  StartTarget();
  EXPECT_EQ(target_->stats().hmem, ProviderOffersHmem("tcp;ofi_rxm"));
  if (!target_->stats().hmem) {
    EXPECT_FALSE(target_->capabilities().reaches_device_memory);
    const Status refused =
        target_->RegisterMemory(Addr(local_.data()), 64, Location::Cuda(0), MemoryAccess::kRemote)
            .status();
    EXPECT_EQ(refused.code(), StatusCode::kNotFound) << refused;
    EXPECT_NE(refused.message().find("no FI_HMEM: fi_getinfo(tcp;ofi_rxm, FI_HMEM)"),
              std::string::npos)
        << refused;
  }

  RdmaTransportOptions shm;
  shm.provider = "shm";
  if (!ProbeRdmaProvider(shm).ok()) GTEST_SKIP() << "libfabric provider shm unavailable";
  // Debian 12's libfabric does (without CUDA support): the path below runs in CI.
  if (!ProviderOffersHmem("shm")) GTEST_SKIP() << "libfabric's shm offers no FI_HMEM here";
  for (const bool ask : {false, true}) {
    SCOPED_TRACE(ask ? "FI_HMEM asked" : "FI_HMEM not asked");
    shm.hmem = ask;
    TestContext target_ctx(kTargetIncarnation);
    TestContext initiator_ctx(0x1111);
    RdmaTransport target(shm);
    RdmaTransport initiator(shm);
    Result<std::string> published = target.Start(&target_ctx, {"target", "127.0.0.1"});
    ASSERT_TRUE(published.ok()) << published.status();
    ASSERT_TRUE(initiator.Start(&initiator_ctx, {"initiator", "127.0.0.1"}).ok());
    initiator_ctx.AddPeer("target", &target);
    EXPECT_EQ(target.stats().hmem, ask);
    EXPECT_EQ(target.capabilities().reaches_device_memory, ask);
    // With FI_HMEM, a libfabric built without CUDA support (Debian's; no GPU runs this unit
    // test) answers fi_mr_regattr(FI_HMEM_CUDA) with ENOSYS: NotFound, nothing registered,
    // counted. Without FI_HMEM rdma refuses at once, naming why.
    const Status device =
        target.RegisterMemory(Addr(local_.data()), 4096, Location::Cuda(0), MemoryAccess::kRemote)
            .status();
    EXPECT_EQ(device.code(), StatusCode::kNotFound) << device;
    EXPECT_NE(device.message().find(ask ? "fi_mr_regattr of cuda:0" : "FI_HMEM not asked"),
              std::string::npos)
        << device;
    EXPECT_EQ(target.stats().device_registrations, 0u);
    EXPECT_EQ(target.stats().device_refusals, ask ? 1u : 0u);
    EXPECT_EQ(target.UnregisterMemory(Addr(local_.data()), 4096).code(), StatusCode::kNotFound);

    // Host memory moves both ways, FI_HMEM or not.
    Result<std::string> key = target.RegisterMemory(Addr(remote_.data()), remote_.size(),
                                                    Location::Cpu(), MemoryAccess::kRemote);
    ASSERT_TRUE(key.ok()) << key.status();
    target_ctx.AddRegion(remote_.data(), remote_.size(), kGeneration, true, "rdma");
    ASSERT_TRUE(initiator
                    .RegisterMemory(Addr(local_.data()), local_.size(), Location::Cpu(),
                                    MemoryAccess::kRemote)
                    .ok());
    SegmentDesc desc = TargetDesc(*published);
    Result<std::shared_ptr<PeerLink>> link = initiator.Connect(desc);
    ASSERT_TRUE(link.ok()) << link.status();
    constexpr size_t kLength = kMiB + 13;
    Fill(local_.data(), kLength, ask ? 7 : 8);
    std::memset(local_.data() + 2 * kMiB, 0, kLength);
    for (const OpCode op : {OpCode::kWrite, OpCode::kRead}) {
      SliceBatch batch(&initiator_ctx);
      Slice slice = Make(op, local_.data() + (op == OpCode::kRead ? 2 * kMiB : 0), 5, kLength);
      slice.remote_key = *key;
      batch.Add(slice);
      ASSERT_EQ(initiator.Submit(**link, batch.ptrs), Status::Ok());
      ASSERT_TRUE(initiator_ctx.WaitAll(batch.ptrs, 20s));
      ASSERT_TRUE(initiator_ctx.StatusOf(batch.ptrs[0]).ok())
          << initiator_ctx.StatusOf(batch.ptrs[0]);
    }
    EXPECT_EQ(std::memcmp(remote_.data() + 5, local_.data(), kLength), 0);
    EXPECT_EQ(std::memcmp(local_.data() + 2 * kMiB, local_.data(), kLength), 0);
    EXPECT_EQ(remote_[4], 0xAA);
    EXPECT_EQ(remote_[5 + kLength], 0xAA);
    link->reset();
    target.Stop();
    initiator.Stop();
  }
}

TEST_F(RdmaTransportTest, PublishesAnEndpointBoundToTheBindHostOnly) {
  StartTarget();
  Result<PublishedEndpoints> endpoints = DecodeEndpoints(published_);
  ASSERT_TRUE(endpoints.ok()) << endpoints.status();
  EXPECT_EQ(endpoints->provider, "tcp;ofi_rxm");
  ASSERT_EQ(endpoints->endpoints.size(), 1u);  // 127.0.0.1 belongs to one domain, "lo"
  const std::string& address = endpoints->endpoints[0].address;
  ASSERT_EQ(address.size(), sizeof(sockaddr_in));
  sockaddr_in sin{};
  std::memcpy(&sin, address.data(), sizeof(sin));
  EXPECT_EQ(sin.sin_family, AF_INET);
  EXPECT_EQ(ntohl(sin.sin_addr.s_addr), INADDR_LOOPBACK) << "listens beyond 127.0.0.1";
  EXPECT_NE(sin.sin_port, 0);
  Result<RemoteKey> key = DecodeKey(remote_key_);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->base, Addr(remote_.data()));
  EXPECT_EQ(key->length, remote_.size());
  EXPECT_EQ(key->rkeys.size(), 1u);

  // The device filter: a domain that does not own 127.0.0.1 leaves nothing to use.
  RdmaTransportOptions other = TcpOptions();
  other.devices = {"no-such-device"};
  RdmaTransport filtered(other);
  EXPECT_EQ(filtered.Start(&target_ctx_, {"b", "127.0.0.1"}).status().code(),
            StatusCode::kUnavailable);
}

TEST_F(RdmaTransportTest, WritesThenReadsBackOddSizesAndAlignments) {
  StartTarget();
  StartInitiator();
  std::shared_ptr<PeerLink> link = Connect();
  ASSERT_NE(link, nullptr);
  const std::vector<std::pair<size_t, size_t>> cases = {
      {1, 1}, {4095, 4099}, {64 * kKiB + 3, 2 * kMiB + 7}, {8 * kMiB, 16 * kMiB + 13}};
  SliceBatch writes(&initiator_ctx_);
  SliceBatch reads(&initiator_ctx_);
  size_t at = 0;
  std::vector<size_t> sources;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto [length, offset] = cases[i];
    Fill(local_.data() + at, length, static_cast<uint32_t>(i + 1));
    sources.push_back(at);
    writes.Add(Make(OpCode::kWrite, local_.data() + at, offset, length));
    at += length + 3;
  }
  ASSERT_TRUE(Run(*link, writes));
  ASSERT_TRUE(AllOk(writes));
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto [length, offset] = cases[i];
    EXPECT_EQ(std::memcmp(remote_.data() + offset, local_.data() + sources[i], length), 0) << i;
    EXPECT_EQ(remote_[offset - 1], 0xAA) << i;       // nothing before the range...
    EXPECT_EQ(remote_[offset + length], 0xAA) << i;  // ...or after it
  }
  const size_t back = 16 * kMiB + 5;
  size_t into = back;
  for (size_t i = 0; i < cases.size(); ++i) {
    reads.Add(Make(OpCode::kRead, local_.data() + into, cases[i].second, cases[i].first));
    into += cases[i].first + 1;
  }
  ASSERT_TRUE(Run(*link, reads));
  ASSERT_TRUE(AllOk(reads));
  into = back;
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(std::memcmp(local_.data() + into, local_.data() + sources[i], cases[i].first), 0)
        << i;
    into += cases[i].first + 1;
  }
  EXPECT_EQ(initiator_ctx_.duplicate_completions(), 0u);
  EXPECT_EQ(target_ctx_.pin_calls(), 0u) << "no error, so no access check was needed";
}

TEST_F(RdmaTransportTest, ManyOperationsInFlightFromSeveralThreads) {
  RdmaTransportOptions o = TcpOptions();
  o.max_inflight = 16;  // far fewer than queued: the domain's queue holds the rest
  StartTarget();
  StartInitiator(o);
  std::shared_ptr<PeerLink> link = Connect();
  ASSERT_NE(link, nullptr);
  constexpr size_t kThreads = 4;
  constexpr size_t kPerThread = 512;
  constexpr size_t kSize = 8 * kKiB;
  Fill(local_.data(), kThreads * kPerThread * kSize, 7);
  std::vector<SliceBatch> batches;
  for (size_t t = 0; t < kThreads; ++t) batches.emplace_back(&initiator_ctx_);
  std::atomic<int> submit_errors{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    for (size_t i = 0; i < kPerThread; ++i) {
      const size_t offset = (t * kPerThread + i) * kSize;
      batches[t].Add(Make(OpCode::kWrite, local_.data() + offset, offset + 1, kSize));
    }
    threads.emplace_back([&, t] {
      std::span<Slice* const> all(batches[t].ptrs);
      for (size_t at = 0; at < all.size(); at += 64) {
        if (!initiator_->Submit(*link, all.subspan(at, 64)).ok()) ++submit_errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(submit_errors.load(), 0);
  for (auto& batch : batches) {
    ASSERT_TRUE(initiator_ctx_.WaitAll(batch.ptrs, 20s));
    EXPECT_TRUE(AllOk(batch));
  }
  EXPECT_EQ(std::memcmp(remote_.data() + 1, local_.data(), kThreads * kPerThread * kSize), 0);
  EXPECT_EQ(initiator_->stats().posted, kThreads * kPerThread);
  EXPECT_EQ(initiator_ctx_.duplicate_completions(), 0u);
}

TEST_F(RdmaTransportTest, InvalidSlicesCompleteWithClearErrorsAndMoveNothing) {
  StartTarget();
  StartInitiator();
  std::shared_ptr<PeerLink> link = Connect();
  ASSERT_NE(link, nullptr);
  Fill(local_.data(), kMiB, 3);
  SliceBatch batch(&initiator_ctx_);
  Slice s = Make(OpCode::kWrite, local_.data(), 0, 4096);
  s.remote_key = "garbage";
  Slice* bad_key = batch.Add(s);
  s.remote_key = "";
  Slice* empty_key = batch.Add(s);
  Result<RemoteKey> key = DecodeKey(remote_key_);
  ASSERT_TRUE(key.ok());
  RemoteKey two = *key;
  two.rkeys.push_back(1);
  const std::string two_rkeys = EncodeKey(two);
  s.remote_key = two_rkeys;
  Slice* wrong_count = batch.Add(s);
  Slice* beyond = batch.Add(Make(OpCode::kWrite, local_.data(), kRegionSize - 10, 20));
  Slice before = Make(OpCode::kRead, local_.data(), 0, 64);
  before.remote_addr -= 64;
  Slice* starts_before = batch.Add(before);
  Slice other = Make(OpCode::kWrite, local_.data(), 0, 64);
  other.peer_incarnation = kTargetIncarnation + 1;
  Slice* stale_incarnation = batch.Add(other);
  Slice* empty = batch.Add(Make(OpCode::kWrite, local_.data(), kRegionSize, 0));
  ASSERT_TRUE(Run(*link, batch));
  for (Slice* bad : {bad_key, empty_key, wrong_count, beyond, starts_before}) {
    EXPECT_EQ(initiator_ctx_.StatusOf(bad).code(), StatusCode::kInvalidArgument)
        << initiator_ctx_.StatusOf(bad);
  }
  EXPECT_NE(initiator_ctx_.StatusOf(bad_key).message().find("bad key"), std::string::npos)
      << initiator_ctx_.StatusOf(bad_key);
  EXPECT_NE(initiator_ctx_.StatusOf(beyond).message().find("leaves the registered range"),
            std::string::npos);
  EXPECT_EQ(initiator_ctx_.StatusOf(stale_incarnation).code(), StatusCode::kStale);
  EXPECT_TRUE(initiator_ctx_.StatusOf(empty).ok());
  EXPECT_EQ(initiator_->stats().posted, 0u);
  for (size_t i = 0; i < remote_.size(); i += 4096) ASSERT_EQ(remote_[i], 0xAA) << i;

  // Structural errors refuse the whole call.
  std::vector<Slice*> with_null = {nullptr};
  EXPECT_EQ(initiator_->Submit(*link, with_null).code(), StatusCode::kInvalidArgument);
  std::vector<Slice> too_many(65537);
  std::vector<Slice*> ptrs;
  for (Slice& t : too_many) ptrs.push_back(&t);
  EXPECT_EQ(initiator_->Submit(*link, ptrs).code(), StatusCode::kInvalidArgument);
  struct ForeignLink : PeerLink {};
  ForeignLink foreign;
  EXPECT_EQ(initiator_->Submit(foreign, batch.ptrs).code(), StatusCode::kInvalidArgument);
}

TEST_F(RdmaTransportTest, ConnectNamesThePeerWhenItsEndpointsAreMissingOrMalformed) {
  StartInitiator();
  SegmentDesc desc;
  desc.name = "bob";
  Result<std::shared_ptr<PeerLink>> missing = initiator_->Connect(desc);
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("bob"), std::string::npos);
  desc.transports["rdma"] = "ferry-rdma/1 zz 1\n";
  Result<std::shared_ptr<PeerLink>> malformed = initiator_->Connect(desc);
  EXPECT_EQ(malformed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(malformed.status().message().find("bob"), std::string::npos);
  desc.transports["rdma"] = EncodeEndpoints({"verbs;ofi_rxm", {{"f", "d", true, "ab"}}});
  EXPECT_EQ(initiator_->Connect(desc).status().code(), StatusCode::kUnavailable);
}

TEST_F(RdmaTransportTest, ConcurrentRegistrationOfDifferentRanges) {
  StartInitiator();
  constexpr int kThreads = 4;
  constexpr int kRounds = 50;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const uint64_t base = Addr(remote_.data()) + static_cast<uint64_t>(t) * kMiB;
      for (int r = 0; r < kRounds; ++r) {
        const uint64_t length = 4096 * static_cast<uint64_t>(1 + r % 7);
        Result<std::string> key =
            initiator_->RegisterMemory(base, length, Location::Cpu(), MemoryAccess::kRemote);
        if (!key.ok() || !initiator_->UnregisterMemory(base, length).ok()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace ferry::rdma
