// Flag parsing, byte sizes, the --check patterns and the report of ferry-bench.
#include "bench/bench_options.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_report.h"
#include "bench/pattern.h"
#include "bench/raw_baseline_runner.h"

namespace ferry::bench {
namespace {

Result<BenchOptions> Parse(std::vector<std::string> args) { return ParseBenchOptions(args); }

const std::vector<std::string> kInitiator = {"--segment_id=127.0.0.1:1234",
                                             "--target_addr=0x7f0000001000"};

TEST(BenchOptionsTest, DefaultsForAnInitiator) {
  Result<BenchOptions> o = Parse(kInitiator);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->mode, BenchMode::kInitiator);
  EXPECT_EQ(o->metadata_server, "P2PHANDSHAKE");
  EXPECT_EQ(o->host, "127.0.0.1");
  EXPECT_EQ(o->rpc_port, 0);
  EXPECT_EQ(o->target_addr, 0x7f0000001000u);
  EXPECT_EQ(o->operation, BenchOperation::kWrite);
  EXPECT_EQ(o->block_size, 65536u);
  EXPECT_EQ(o->batch_size, 32u);
  EXPECT_EQ(o->threads, 1u);
  EXPECT_EQ(o->duration_s, 5);
  EXPECT_FALSE(o->duration_given);
  EXPECT_EQ(o->EffectiveBufferSize(), uint64_t{256} << 20);
  EXPECT_FALSE(o->check);
  EXPECT_FALSE(o->json);
  EXPECT_EQ(o->protocol, "tcp");
  EXPECT_EQ(o->TransportHint(), "tcp");
  EXPECT_TRUE(o->host_id.empty());
  EXPECT_FALSE(o->managed);
  EXPECT_EQ(o->ManagedLocation(), "cpu");
  EXPECT_EQ(o->inflight, 1u);  // the drained loop stays the default
  EXPECT_EQ(o->working_set, 0u);
  EXPECT_FALSE(o->wait_block);
  EXPECT_EQ(o->WorkingSetBytes(), o->SliceBytes());
}

TEST(BenchOptionsTest, ParsesEveryFlag) {
  Result<BenchOptions> o = Parse(
      {"--mode=initiator", "--metadata_server=etcd://127.0.0.1:2379", "--local_server_name=me",
       "--host=127.0.0.2", "--rpc_port=15000", "--segment_id=peer", "--target_addr=abc000",
       "--protocol=tcp,shm", "--operation=read", "--block_size=4K", "--batch_size=8", "--threads=4",
       "--duration=0.5", "--buffer_size=1G", "--check", "--json=true"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->metadata_server, "etcd://127.0.0.1:2379");
  EXPECT_EQ(o->local_server_name, "me");
  EXPECT_EQ(o->host, "127.0.0.2");
  EXPECT_EQ(o->rpc_port, 15000);
  EXPECT_EQ(o->segment_id, "peer");
  EXPECT_EQ(o->target_addr, 0xabc000u);
  EXPECT_EQ(o->Transports(), (std::vector<std::string>{"tcp", "shm"}));
  EXPECT_EQ(o->operation, BenchOperation::kRead);
  EXPECT_EQ(o->block_size, 4096u);
  EXPECT_EQ(o->batch_size, 8u);
  EXPECT_EQ(o->threads, 4u);
  EXPECT_EQ(o->duration_s, 0.5);
  EXPECT_TRUE(o->duration_given);
  EXPECT_EQ(o->EffectiveBufferSize(), uint64_t{1} << 30);
  EXPECT_TRUE(o->check);
  EXPECT_TRUE(o->json);
}

TEST(BenchOptionsTest, ParsesTheTransportFlags) {
  Result<BenchOptions> o = Parse({"--mode=target", "--protocol=shm,cxl,rdma", "--host_id=left",
                                  "--rdma_provider=verbs;ofi_rxm", "--rdma_devices=mlx5_0,mlx5_1",
                                  "--cxl_window=/dev/dax0.0", "--cxl_window_size=1G", "--managed"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->host_id, "left");
  EXPECT_EQ(o->rdma_provider, "verbs;ofi_rxm");
  EXPECT_EQ(o->rdma_devices, (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  EXPECT_EQ(o->cxl_window, "/dev/dax0.0");
  EXPECT_EQ(o->cxl_window_size, uint64_t{1} << 30);
  EXPECT_TRUE(o->managed);
  EXPECT_EQ(o->ManagedLocation(), "cxl");
  EXPECT_EQ(o->TransportHint(), "");  // a list: the engine chooses

  const EngineOptions e = MakeEngineOptions(*o);
  EXPECT_EQ(e.transports, (std::vector<std::string>{"shm", "cxl", "rdma"}));
  EXPECT_EQ(e.host_id, "left");
  EXPECT_EQ(e.rdma_provider, "verbs;ofi_rxm");
  EXPECT_EQ(e.rdma_devices, (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  EXPECT_EQ(e.cxl_window, "/dev/dax0.0");
  EXPECT_EQ(e.cxl_window_size, uint64_t{1} << 30);
}

TEST(BenchOptionsTest, EngineOptionsFollowTheFlags) {
  Result<BenchOptions> o =
      Parse({"--mode=target", "--metadata_server=http://127.0.0.1:8080/metadata",
             "--local_server_name=me", "--host=127.0.0.2", "--rpc_port=15000", "--take_over_name"});
  ASSERT_TRUE(o.ok()) << o.status();
  const EngineOptions e = MakeEngineOptions(*o);
  EXPECT_EQ(e.metadata_conn, "http://127.0.0.1:8080/metadata");
  EXPECT_EQ(e.local_server_name, "me");
  EXPECT_TRUE(e.take_over_name);
  EXPECT_FALSE(MakeEngineOptions(*Parse({"--mode=target"})).take_over_name);
  EXPECT_EQ(e.host, "127.0.0.2");
  EXPECT_EQ(e.rpc_port, 15000);
  EXPECT_TRUE(e.advertise_host.empty());
  EXPECT_TRUE(e.port_range.empty());
  const EngineOptions wide =
      MakeEngineOptions(*Parse({"--mode=target", "--host=0.0.0.0", "--advertise_host=10.0.0.7",
                                "--port_range=20000-20100"}));
  EXPECT_EQ(wide.host, "0.0.0.0");
  EXPECT_EQ(wide.advertise_host, "10.0.0.7");
  EXPECT_EQ(wide.port_range, "20000-20100");
  EXPECT_EQ(e.transports, std::vector<std::string>{"tcp"});
  EXPECT_TRUE(e.host_id.empty());
  EXPECT_TRUE(e.cxl_window.empty());
  EXPECT_EQ(e.cxl_window_size, 0u);
  EXPECT_TRUE(e.rdma_devices.empty());
  // Everything ferry-bench has no flag for keeps the engine's default.
  EXPECT_EQ(e.task_timeout, EngineOptions{}.task_timeout);
  EXPECT_EQ(e.shm_dir, EngineOptions{}.shm_dir);
}

TEST(BenchOptionsTest, OneNamedTransportIsTheRequestHint) {
  for (const char* name : {"tcp", "shm", "rdma"}) {
    Result<BenchOptions> o = Parse({"--mode=target", std::string("--protocol=") + name});
    ASSERT_TRUE(o.ok()) << o.status();
    EXPECT_EQ(o->TransportHint(), name);
  }
  Result<BenchOptions> cxl =
      Parse({"--mode=target", "--protocol=cxl", "--cxl_window=/w", "--cxl_window_size=0"});
  ASSERT_TRUE(cxl.ok()) << cxl.status();
  EXPECT_EQ(cxl->TransportHint(), "cxl");
  EXPECT_EQ(cxl->cxl_window_size, 0u);  // all of the window
  Result<BenchOptions> automatic = Parse({"--mode=target", "--protocol=auto"});
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->TransportHint(), "");
}

TEST(BenchOptionsTest, ManagedNeedsATransportThatSharesMemory) {
  EXPECT_TRUE(Parse({"--mode=target", "--protocol=shm", "--managed"}).ok());
  EXPECT_TRUE(Parse({"--mode=target", "--protocol=tcp,shm", "--managed=true"}).ok());
  EXPECT_TRUE(Parse({"--mode=target", "--protocol=auto", "--managed"}).ok());
  EXPECT_TRUE(Parse({"--mode=target", "--managed=false"}).ok());  // tcp, plain pages
  EXPECT_TRUE(Parse({"--mode=target", "--protocol=cxl", "--cxl_window=/w", "--managed"}).ok());
  EXPECT_TRUE(Parse({"--mode=target", "--protocol=auto", "--cxl_window=/w", "--managed"}).ok());
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--mode=target", "--managed"},  // tcp alone cannot share memory
           {"--mode=target", "--protocol=shm", "--cxl_window=/w", "--managed"},
           {"--mode=target", "--managed=perhaps", "--protocol=shm"}}) {
    Result<BenchOptions> o = Parse(args);
    EXPECT_FALSE(o.ok()) << args[1];
    if (!o.ok()) EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(BenchOptionsTest, LocationPutsTheBuffersInDeviceMemoryWithoutCheck) {
  Result<BenchOptions> o = Parse({"--mode=target", "--location=cuda:0", "--protocol=tcp"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->OnDevice());
  EXPECT_TRUE(o->BufferFromEngine());
  EXPECT_EQ(o->BufferLocation(), "cuda:0");
  o = Parse({"--location=cpu", "--managed", "--protocol=shm", "--mode=target"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_FALSE(o->OnDevice());
  EXPECT_EQ(o->BufferLocation(), "cpu");
  o = Parse(kInitiator);
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(o->BufferFromEngine());
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--mode=target", "--location=cuda"},               // one device, by index
           {"--mode=target", "--location=gpu:0"},              // not a location ferry-bench knows
           {"--mode=target", "--location=cuda:0x1"},           // not an index
           {"--mode=target", "--location=cuda:0", "--check"},  // the CPU never touches it
           {"--mode=target", "--location=cuda:1", "--managed", "--protocol=shm"},
           {"--mode=target", "--location=cuda:0", "--target_file=kv.bin"}}) {
    Result<BenchOptions> bad = Parse(args);
    EXPECT_FALSE(bad.ok()) << args[1] << " " << args.back();
    if (!bad.ok()) EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(BenchOptionsTest, TargetFileAddsTheFileTransportAndItsOptions) {
  Result<BenchOptions> o =
      Parse({"--mode=target", "--target_file=/tmp/x", "--direct_io=false", "--file_queue_depth=8"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->target_file, "/tmp/x");
  EXPECT_EQ(o->Transports(), (std::vector<std::string>{"tcp", "file"}));
  const EngineOptions e = MakeEngineOptions(*o);
  EXPECT_FALSE(e.file_direct_io);
  EXPECT_EQ(e.file_queue_depth, 8u);
  EXPECT_TRUE(MakeEngineOptions(*Parse({"--mode=target"})).file_direct_io);
  // Named already, or within auto: not added again.
  EXPECT_EQ(Parse({"--mode=target", "--target_file=/f", "--protocol=file"})->Transports(),
            (std::vector<std::string>{"file", "tcp"}));  // tcp registers the engine's memory
  EXPECT_EQ(Parse({"--mode=target", "--target_file=/f", "--protocol=auto"})->Transports(),
            std::vector<std::string>{"auto"});
  // An initiator runs against the target's file buffer with the file transport.
  std::vector<std::string> initiator = kInitiator;
  initiator.push_back("--protocol=file");
  ASSERT_TRUE(Parse(initiator).ok());
  EXPECT_EQ(Parse(initiator)->TransportHint(), "file");
  EXPECT_EQ(Parse(initiator)->Transports(), (std::vector<std::string>{"file", "tcp"}));
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--mode=initiator", "--segment_id=s", "--target_file=/f"},  // the target's flag
           {"--mode=target", "--target_file=/f", "--protocol=shm", "--managed"},
           {"--mode=target", "--target_file="},
           {"--mode=target", "--file_queue_depth=0"},
           {"--mode=target", "--file_queue_depth=4097"}}) {
    Result<BenchOptions> bad = Parse(args);
    EXPECT_FALSE(bad.ok()) << args.back();
    if (!bad.ok()) EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(BenchOptionsTest, TargetNeedsNoPeerAndAutoIsOneName) {
  Result<BenchOptions> o = Parse({"--mode=target", "--protocol=auto", "-check"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->mode, BenchMode::kTarget);
  EXPECT_EQ(o->Transports(), std::vector<std::string>{"auto"});
  EXPECT_TRUE(o->check);
}

TEST(BenchOptionsTest, RejectsBadInput) {
  const std::vector<std::vector<std::string>> bad = {
      {"--mode=target", "--nope=1"},
      {"--mode=target", "stray"},
      {"--mode=both"},
      {"--mode=target", "--rpc_port=70000"},
      {"--mode=target", "--block_size=0"},
      {"--mode=target", "--block_size=4T"},
      {"--mode=target", "--block_size=-4"},
      {"--mode=target", "--duration=0"},
      {"--mode=target", "--threads=0"},
      {"--mode=target", "--check=maybe"},
      {"--mode=target", "--host"},
      {"--mode=target", "--host="},
      {"--target_addr=0x10"},
      {"--mode=target", "--block_size=1M", "--buffer_size=16M"},
      {"--segment_id=x", "--target_addr=zz"},
      {"--mode=target", "--host_id="},
      {"--mode=target", "--host_id"},
      {"--mode=target", "--rdma_provider="},
      {"--mode=target", "--rdma_devices=a,,b"},
      {"--mode=target", "--rdma_devices=a,"},
      {"--mode=target", "--cxl_window="},
      {"--mode=target", "--cxl_window=/w", "--cxl_window_size=-1"},
      {"--mode=target", "--cxl_window_size=1G"},  // no window to size
      {"--mode=target", "--protocol=cxl"},        // no window
      {"--mode=target", "--protocol=auto,tcp"},
      {"--mode=target", "--protocol=tcp,tcp"},
      {"--mode=target", "--protocol=tcp,"},
      {"--mode=target", "--protocol=,shm"}};
  for (const auto& args : bad) {
    Result<BenchOptions> o = Parse(args);
    EXPECT_FALSE(o.ok()) << args.back();
    if (!o.ok()) EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(BenchOptionsTest, TargetAddrIsAnOptionalOverride) {
  Result<BenchOptions> o = Parse({"--segment_id=127.0.0.1:1234"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->target_addr, 0u);  // the initiator asks the segment for its first buffer
  EXPECT_FALSE(Parse({"--segment_id=x", "--target_addr=0"}).ok());
}

TEST(BenchOptionsTest, HelpNeedsNothingElse) {
  Result<BenchOptions> o = Parse({"--help"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->help);
  EXPECT_NE(BenchUsage().find("--target_addr"), std::string::npos);
}

TEST(BenchOptionsTest, BufferDefaultCoversTheWorkingSet) {
  Result<BenchOptions> o =
      Parse({"--mode=target", "--block_size=4M", "--batch_size=32", "--threads=4"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->EffectiveBufferSize(), uint64_t{512} << 20);
}

TEST(BenchOptionsTest, InflightBatchesEachGetTheirOwnSlices) {
  Result<BenchOptions> o = Parse({"--mode=target", "--block_size=4K", "--batch_size=2",
                                  "--threads=2", "--inflight=3", "--wait=block"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->inflight, 3u);
  EXPECT_TRUE(o->wait_block);
  EXPECT_EQ(o->Positions(), 6u);
  EXPECT_EQ(o->SlicesPerPosition(), 1u);
  EXPECT_EQ(o->WorkingSetBytes(), 6u * 8192);
  // Position p always uses slice p (no --working_set): 6 distinct slices, in order.
  for (uint64_t p = 0; p < 6; ++p) {
    EXPECT_EQ(o->SliceOffset(p, 0), p * 8192);
    EXPECT_EQ(o->SliceOffset(p, 7), p * 8192);
  }
}

TEST(BenchOptionsTest, WorkingSetRingsTileWithoutOverlap) {
  // 2 threads * 2 in flight * 8K slices = 32K a round; 100K rounds down to 3 rounds (96K).
  Result<BenchOptions> o = Parse({"--mode=target", "--block_size=4K", "--batch_size=2",
                                  "--threads=2", "--inflight=2", "--working_set=100K"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->SlicesPerPosition(), 3u);
  EXPECT_EQ(o->WorkingSetBytes(), 96u * 1024);
  std::vector<int> used(12, 0);
  for (uint64_t p = 0; p < o->Positions(); ++p) {
    for (uint64_t j = 0; j < o->SlicesPerPosition(); ++j) {
      const uint64_t offset = o->SliceOffset(p, j);
      ASSERT_EQ(offset % o->SliceBytes(), 0u);
      ASSERT_LT(offset, o->WorkingSetBytes());
      ++used[offset / o->SliceBytes()];
    }
    EXPECT_EQ(o->SliceOffset(p, 3), o->SliceOffset(p, 0));  // the ring wraps
  }
  EXPECT_EQ(used, std::vector<int>(12, 1));
  // Smaller than one round: one slice per position; the default buffer covers the working set.
  o = Parse(
      {"--mode=target", "--block_size=4M", "--batch_size=32", "--inflight=4", "--working_set=1M"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->WorkingSetBytes(), uint64_t{512} << 20);
  EXPECT_EQ(o->EffectiveBufferSize(), uint64_t{512} << 20);

  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--mode=target", "--inflight=0"},
        {"--mode=target", "--inflight=1025"},
        {"--mode=target", "--inflight"},
        {"--mode=target", "--working_set=lots"},
        {"--mode=target", "--wait=spin"},
        {"--mode=target", "--block_size=1G", "--batch_size=65536", "--inflight=1024"},
        {"--mode=target", "--inflight=4", "--block_size=1M", "--buffer_size=64M"}}) {
    Result<BenchOptions> r = Parse(bad);
    EXPECT_FALSE(r.ok()) << bad.back();
    if (!r.ok()) EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(BenchOptionsTest, LastOfARepeatedFlagWinsAndSpacedValuesWork) {
  // The bench scripts append overrides to a base command line (start_target --protocol=shm).
  Result<BenchOptions> o =
      Parse({"--mode=target", "--protocol=tcp", "--host=127.0.0.2", "--protocol=shm",
             "--block_size", "4K", "--check=false", "--check", "--local_server_name="});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->protocol, "shm");
  EXPECT_EQ(o->block_size, 4096u);
  EXPECT_TRUE(o->check);
  EXPECT_TRUE(o->local_server_name.empty());
  // Errors name the flag.
  Result<BenchOptions> bad = Parse({"--mode=target", "--block_size=lots"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--block_size"), std::string::npos) << bad.status();
  bad = Parse({"--mode=target", "--nope=1"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--nope"), std::string::npos) << bad.status();
}

TEST(BenchOptionsTest, SweepListsDefaultToTheSingleRunFlags) {
  Result<BenchOptions> o =
      Parse({"--segment_id=x", "--sweep", "--protocol=shm", "--threads=2", "--operation=read"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->sweep);
  EXPECT_EQ(o->sweep_protocols, std::vector<std::string>{"shm"});
  EXPECT_EQ(o->sweep_threads, std::vector<uint64_t>{2});
  EXPECT_EQ(o->sweep_operations, std::vector<BenchOperation>{BenchOperation::kRead});
  EXPECT_EQ(o->sweep_block_sizes,
            (std::vector<uint64_t>{4096, 16384, 65536, 262144, 1 << 20, 4 << 20}));
  EXPECT_TRUE(o->csv.empty());
  EXPECT_TRUE(o->raw_baselines.empty());

  o = Parse({"--segment_id=x", "--sweep", "--sweep_protocols=tcp,shm", "--sweep_threads=1,2",
             "--sweep_block_sizes=4K,1M", "--sweep_operations=write,read", "--csv=out.csv",
             "--raw_baselines=none", "--inflight=4", "--batch_size=8"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->sweep_protocols, (std::vector<std::string>{"tcp", "shm"}));
  EXPECT_EQ(o->sweep_threads, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(o->sweep_block_sizes, (std::vector<uint64_t>{4096, 1 << 20}));
  EXPECT_EQ(o->sweep_operations,
            (std::vector<BenchOperation>{BenchOperation::kWrite, BenchOperation::kRead}));
  EXPECT_EQ(o->csv, "out.csv");
  EXPECT_EQ(o->raw_baselines, "none");
  // The buffers are sized for the largest point: 2 threads * 4 in flight * 8 blocks of 1M.
  const BenchOptions largest = o->LargestPoint();
  EXPECT_EQ(largest.WorkingSetBytes(), uint64_t{64} << 20);
  EXPECT_EQ(largest.protocol, "tcp");
  const BenchOptions point = o->ForPoint("shm", BenchOperation::kRead, 1, 4096);
  EXPECT_FALSE(point.sweep);
  EXPECT_EQ(point.TransportHint(), "shm");
  EXPECT_EQ(point.operation, BenchOperation::kRead);
  EXPECT_EQ(point.SliceBytes(), 8u * 4096);

  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--mode=target", "--sweep"},
        {"--segment_id=x", "--sweep", "--json"},
        {"--segment_id=x", "--sweep", "--check"},
        {"--segment_id=x", "--sweep", "--sweep_block_sizes=4K,,1M"},
        {"--segment_id=x", "--sweep", "--sweep_threads=0"},
        {"--segment_id=x", "--sweep", "--sweep_operations=copy"},
        {"--segment_id=x", "--sweep", "--sweep_protocols=tcp,tcp,"},
        {"--segment_id=x", "--sweep", "--sweep_protocols=cxl"},  // no window
        {"--segment_id=x", "--sweep", "--sweep_block_sizes=4M", "--buffer_size=64M",
         "--inflight=4"},
        {"--segment_id=x", "--sweep", "--csv="}}) {
    Result<BenchOptions> r = Parse(bad);
    EXPECT_FALSE(r.ok()) << bad.back();
    if (!r.ok()) EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(BenchOptionsTest, EachSweepTransportHasItsRawBaseline) {
  Result<BenchOptions> o = Parse({"--segment_id=x", "--sweep", "--batch_size=8", "--duration=2"});
  ASSERT_TRUE(o.ok()) << o.status();
  std::optional<RawBaselineCommand> tcp =
      RawBaselineFor(o->ForPoint("tcp", BenchOperation::kRead, 2, 65536));
  ASSERT_TRUE(tcp.has_value());
  EXPECT_EQ(tcp->name, "tcp-stream");
  EXPECT_EQ(tcp->program, "ferry-raw-tcp-baseline");
  EXPECT_EQ(tcp->args, (std::vector<std::string>{"--block_size=65536", "--duration=2.000000"}));
  std::optional<RawBaselineCommand> shm =
      RawBaselineFor(o->ForPoint("shm", BenchOperation::kRead, 2, 65536));
  ASSERT_TRUE(shm.has_value());
  EXPECT_EQ(shm->name, "shm-cma");
  EXPECT_EQ(shm->args, (std::vector<std::string>{
                           "--kind=cma", "--operation=read", "--block_size=65536", "--batch_size=8",
                           "--threads=2", "--duration=2.000000", "--working_set=1048576"}));
  BenchOptions managed = o->ForPoint("shm", BenchOperation::kWrite, 1, 4096);
  managed.managed = true;
  EXPECT_EQ(RawBaselineFor(managed)->name, "shm-memcpy");
  EXPECT_FALSE(RawBaselineFor(o->ForPoint("rdma", BenchOperation::kWrite, 1, 4096)).has_value());
  EXPECT_FALSE(RawBaselineFor(o->ForPoint("auto", BenchOperation::kWrite, 1, 4096)).has_value());
}

// RunRawBaseline against small programs standing in for a baseline's behaviours: one that
// answers, one that fails, one missing, and one that prints its line, closes its stdout and
// keeps running: it is killed at the timeout (not waited for), and the call says so.
TEST(RawBaselineRunnerTest, ReadsTheLineAndBoundsTheChild) {
  char folder_template[] = "/tmp/ferry-raw-runner-XXXXXX";
  ASSERT_NE(mkdtemp(folder_template), nullptr);
  const std::string folder = folder_template;
  auto write_program = [&folder](const std::string& name, const std::string& body) {
    const std::string path = folder + "/" + name;
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "#!/bin/sh\n%s\n", body.c_str());
    std::fclose(f);
    ASSERT_EQ(chmod(path.c_str(), 0755), 0);
  };
  write_program("answers", R"(echo '{"gbps":1.5,"p99_us":7,"working_set":4096}')");
  write_program("fails", "echo oops >&2; exit 3");
  write_program("lingers", R"(echo '{"gbps":1.5}'; exec >&-; exec sleep 60)");

  Result<RawPoint> ok = RunRawBaseline(folder, {"good", "answers", {}}, std::chrono::seconds(20));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->baseline, "good");
  EXPECT_EQ(ok->gbps, 1.5);
  EXPECT_EQ(ok->p99_us, 7);
  EXPECT_EQ(ok->working_set, 4096u);
  Result<RawPoint> failed = RunRawBaseline(folder, {"bad", "fails", {}}, std::chrono::seconds(20));
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("exit status 3"), std::string::npos) << failed.status();
  EXPECT_EQ(
      RunRawBaseline(folder, {"none", "missing", {}}, std::chrono::seconds(20)).status().code(),
      StatusCode::kNotFound);
  const auto start = std::chrono::steady_clock::now();
  Result<RawPoint> lingering =
      RunRawBaseline(folder, {"slow", "lingers", {}}, std::chrono::milliseconds(300));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  ASSERT_FALSE(lingering.ok());
  EXPECT_EQ(lingering.status().code(), StatusCode::kTimeout) << lingering.status();
  for (const char* name : {"answers", "fails", "lingers"}) unlink((folder + "/" + name).c_str());
  rmdir(folder.c_str());
}

TEST(ByteSizeTest, Suffixes) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("4k"), 4096u);
  EXPECT_EQ(*ParseByteSize("64KiB"), 65536u);
  EXPECT_EQ(*ParseByteSize("4M"), uint64_t{4} << 20);
  EXPECT_EQ(*ParseByteSize("2GB"), uint64_t{2} << 30);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("K").ok());
  EXPECT_FALSE(ParseByteSize("1.5M").ok());
  EXPECT_FALSE(ParseByteSize("99999999999G").ok());
}

TEST(PatternTest, DependsOnSeedAndOffsetOnly) {
  std::vector<uint8_t> whole(1000), part(100);
  FillPattern(7, 0, whole.data(), whole.size());
  FillPattern(7, 333, part.data(), part.size());  // unaligned start and end
  EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + 333));
  EXPECT_FALSE(FindPatternMismatch(7, 333, part.data(), part.size()).has_value());
  EXPECT_EQ(FindPatternMismatch(8, 0, whole.data(), whole.size()), 0u);
}

TEST(PatternTest, NamesTheFirstBadByte) {
  std::vector<uint8_t> data(4096);
  FillPattern(kTargetPatternSeed, 8192, data.data(), data.size());
  data[1234] ^= 1;
  data[3000] ^= 1;
  EXPECT_EQ(FindPatternMismatch(kTargetPatternSeed, 8192, data.data(), data.size()), 8192u + 1234u);
}

TEST(ReportTest, PercentilesAndJson) {
  std::vector<double> samples;
  for (int i = 100; i >= 1; --i) samples.push_back(i);
  EXPECT_EQ(Percentile(samples, 50), 50);
  EXPECT_EQ(Percentile(samples, 99), 99);
  std::vector<double> empty;
  EXPECT_EQ(Percentile(empty, 99), 0);

  BenchOptions o;
  o.block_size = 4096;
  BenchResult r;
  r.bytes = 2'000'000'000;
  r.ops = 488281;
  r.seconds = 2;
  r.p50_us = 10;
  r.p99_us = 20;
  r.mean_us = 12.5;
  r.working_set = 131072;
  o.inflight = 4;
  const std::string json = FormatJson(o, r);
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
  EXPECT_NE(json.find("\"operation\":\"write\""), std::string::npos);
  EXPECT_NE(json.find("\"protocol\":\"tcp\""), std::string::npos);
  EXPECT_NE(json.find("\"transport\":\"\""), std::string::npos);  // none seen
  EXPECT_NE(json.find("\"block_size\":4096"), std::string::npos);
  EXPECT_NE(json.find("\"gbps\":1.000000"), std::string::npos);
  EXPECT_NE(json.find("\"errors\":0"), std::string::npos);
  EXPECT_NE(json.find("\"inflight\":4,\"working_set\":131072,"), std::string::npos);
  EXPECT_NE(json.find("\"mean_us\":12.5"), std::string::npos);
  EXPECT_NE(json.find("\"target\":\"memory\",\"file_io\":\"\""), std::string::npos);
  BenchResult file = r;
  file.target_is_file = true;
  file.file_io = "buffered+direct";
  EXPECT_NE(FormatJson(o, file).find("\"target\":\"file\",\"file_io\":\"buffered+direct\""),
            std::string::npos)
      << FormatJson(o, file);
  EXPECT_NE(FormatSummary(o, file).find("a file buffer, I/O buffered+direct"), std::string::npos);
  r.retries = 3;
  EXPECT_NE(
      FormatJson(o, r).find("\"errors\":0,\"retries\":3,\"fallbacks\":0,\"stale_refreshes\":0,"
                            "\"task_failures\":0}"),
      std::string::npos)
      << FormatJson(o, r);
  for (const char* key :
       {"batch_size", "threads", "bytes", "seconds", "ops_per_s", "p50_us", "p99_us"}) {
    EXPECT_NE(json.find("\"" + std::string(key) + "\":"), std::string::npos) << key;
  }
}

TEST(ReportTest, CsvRowsMatchTheHeader) {
  EXPECT_EQ(CsvHeader(),
            "protocol,operation,block_size,threads,batch_size,inflight,gbps,ops_per_s,p50_us,"
            "p99_us,raw_baseline,raw_gbps,raw_p99_us,ratio,transport,errors");
  BenchOptions o;
  o.protocol = "shm";
  o.operation = BenchOperation::kRead;
  o.block_size = 65536;
  o.threads = 2;
  o.inflight = 4;
  BenchResult r;
  r.bytes = 3'000'000'000;
  r.ops = 45776;
  r.seconds = 1;
  r.p50_us = 100;
  r.p99_us = 250;
  r.transport = "shm";
  RawPoint raw{"shm-cma", 4.0, 200, 0};
  EXPECT_EQ(FormatCsvRow(o, r, raw),
            "shm,read,65536,2,32,4,3.000000,45776.0,100.0,250.0,shm-cma,4.000000,200.0,0.7500,"
            "shm,0");
  raw.p99_us = 0;  // the tcp stream measures no latency
  EXPECT_NE(FormatCsvRow(o, r, raw).find(",250.0,shm-cma,4.000000,,0.7500,"), std::string::npos)
      << FormatCsvRow(o, r, raw);
  // No baseline: its four columns stay empty; the column count stays that of the header.
  const std::string row = FormatCsvRow(o, r, RawPoint{});
  EXPECT_NE(row.find(",250.0,,,,,shm,0"), std::string::npos) << row;
  EXPECT_EQ(std::count(row.begin(), row.end(), ','), 15);
}

TEST(ReportTest, NamesTheTransportsThatCarriedTheTasks) {
  EXPECT_EQ(JoinTransports({}), "");
  EXPECT_EQ(JoinTransports({"shm"}), "shm");
  EXPECT_EQ(JoinTransports({"tcp", "shm", "tcp", ""}), "shm+tcp");

  BenchOptions o;
  o.protocol = "auto";
  BenchResult r;
  r.transport = "shm";
  const std::string json = FormatJson(o, r);
  EXPECT_NE(json.find("\"protocol\":\"auto\",\"transport\":\"shm\""), std::string::npos) << json;
  EXPECT_NE(FormatSummary(o, r).find("over auto (carried by shm)"), std::string::npos)
      << FormatSummary(o, r);
  r.transport.clear();
  EXPECT_NE(FormatSummary(o, r).find("(carried by -)"), std::string::npos);
}

}  // namespace
}  // namespace ferry::bench
