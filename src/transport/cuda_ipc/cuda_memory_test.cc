// The CUDA memory-type helper and the cuda-ipc transport's registration, in one process.
//   CudaWithoutDevice (label "unit", cuda_ipc_test): on a machine without a usable device every
//     call answers at once with Unavailable naming the cause, host memory is nobody's device
//     memory, and the transport does not start.
//   CudaDevice (label "gpu", cuda_device_test): with a device, device pointers are recognised,
//     allocations found and bounded, explicit locations checked, copies checked, and the
//     transport exports exactly the allocation that holds a region.
#include "transport/cuda_ipc/cuda_memory.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "transport/conformance/test_context.h"
#include "transport/cuda_ipc/cuda_ipc_transport.h"
#include "transport/cuda_ipc/cuda_ipc_wire.h"

#if FERRY_CUDA_DEVICE_TESTS
#include <cuda_runtime_api.h>
#endif

namespace ferry {
namespace {

uint64_t Addr(const void* p) { return reinterpret_cast<uint64_t>(p); }  // NOLINT

#if !FERRY_CUDA_DEVICE_TESTS

TEST(CudaWithoutDevice, EveryCallSaysWhyAndTheTransportDoesNotStart) {
  if (cuda::Available().ok()) GTEST_SKIP() << "a CUDA device is present (cuda_device_test)";
  const Status why = cuda::Available();
  EXPECT_EQ(StatusCode::kUnavailable, why.code());
  EXPECT_EQ(0u, why.message().rfind("CUDA: no", 0)) << why;
  EXPECT_EQ(0, cuda::DeviceCount());
  std::vector<unsigned char> host(4096, 7);
  std::vector<unsigned char> other(4096, 0);
  EXPECT_FALSE(cuda::DeviceOf(host.data()).has_value());
  EXPECT_EQ(StatusCode::kUnavailable, cuda::FindAllocation(host.data(), 1).status().code());
  EXPECT_EQ(StatusCode::kUnavailable, cuda::CheckDeviceMemory(host.data(), 1, 0).code());
  EXPECT_EQ(StatusCode::kUnavailable, cuda::Copy(other.data(), host.data(), 16).code());
  EXPECT_EQ(0, other[0]) << "nothing copied";

  transport_testing::TestContext ctx(1);
  CudaIpcTransport transport{CudaIpcTransportOptions{}};
  Result<std::string> started = transport.Start(&ctx, TransportStartInfo{});
  EXPECT_EQ(StatusCode::kUnavailable, started.status().code()) << started.status();
  EXPECT_NE(std::string::npos, started.status().message().find("CUDA")) << started.status();
  EXPECT_EQ(
      StatusCode::kBusy,
      transport.RegisterMemory(Addr(host.data()), 4096, Location::Cuda(0), MemoryAccess::kRemote)
          .status()
          .code());
}

#else

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Status s = cuda::Available(); !s.ok()) GTEST_SKIP() << s;
  }
};

TEST_F(CudaDevice, PointersAllocationsLocationsAndCopies) {
  constexpr size_t kBytes = size_t{4} << 20;
  unsigned char* device = nullptr;
  ASSERT_EQ(cudaSuccess, cudaMalloc(reinterpret_cast<void**>(&device), kBytes));
  void* pinned = nullptr;
  ASSERT_EQ(cudaSuccess, cudaMallocHost(&pinned, 4096));
  std::vector<unsigned char> host(kBytes, 0x21);

  ASSERT_TRUE(cuda::DeviceOf(device + 123).has_value());
  EXPECT_EQ(0, *cuda::DeviceOf(device + 123));
  EXPECT_FALSE(cuda::DeviceOf(host.data()).has_value());
  EXPECT_FALSE(cuda::DeviceOf(pinned).has_value()) << "pinned host memory is host memory";

  Result<cuda::DeviceAllocation> found = cuda::FindAllocation(device + 100, 1000);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(Addr(device), found->base);
  EXPECT_GE(found->size, kBytes);
  EXPECT_EQ(0, found->device);
  EXPECT_EQ(StatusCode::kInvalidArgument,
            cuda::FindAllocation(device + found->size - 10, 20).status().code());
  EXPECT_EQ(StatusCode::kInvalidArgument, cuda::FindAllocation(host.data(), 1).status().code());

  EXPECT_TRUE(cuda::CheckDeviceMemory(device, kBytes, 0).ok());
  EXPECT_EQ(StatusCode::kInvalidArgument,
            cuda::CheckDeviceMemory(device, kBytes, cuda::DeviceCount()).code());
  EXPECT_EQ(StatusCode::kInvalidArgument, cuda::CheckDeviceMemory(host.data(), 16, 0).code());
  const Status on_pinned = cuda::CheckDeviceMemory(pinned, 16, 0);
  EXPECT_EQ(StatusCode::kInvalidArgument, on_pinned.code());
  EXPECT_NE(std::string::npos, on_pinned.message().find("pinned host memory")) << on_pinned;
  // Managed memory is host memory to ferry (cuda_memory.h): never cuda:<n>.
  void* managed = nullptr;
  if (cudaMallocManaged(&managed, 4096) == cudaSuccess) {
    EXPECT_FALSE(cuda::DeviceOf(managed).has_value());
    const Status on_managed = cuda::CheckDeviceMemory(managed, 4096, 0);
    EXPECT_EQ(StatusCode::kInvalidArgument, on_managed.code());
    EXPECT_NE(std::string::npos, on_managed.message().find("managed")) << on_managed;
    cudaFree(managed);
  } else {
    cudaGetLastError();
    std::printf("note: cudaMallocManaged failed here; managed memory not checked\n");
  }

  // host -> device -> device -> host, every hop checked.
  ASSERT_TRUE(cuda::Copy(device, host.data(), kBytes / 2).ok());
  ASSERT_TRUE(cuda::Copy(device + kBytes / 2, device, kBytes / 2).ok());
  std::vector<unsigned char> back(kBytes / 2, 0);
  ASSERT_TRUE(cuda::Copy(back.data(), device + kBytes / 2, back.size()).ok());
  EXPECT_EQ(std::vector<unsigned char>(kBytes / 2, 0x21), back);

  cudaFreeHost(pinned);
  cudaFree(device);
}

TEST_F(CudaDevice, TheTransportExportsTheAllocationHoldingARegion) {
  constexpr size_t kBytes = size_t{8} << 20;
  unsigned char* device = nullptr;
  ASSERT_EQ(cudaSuccess, cudaMalloc(reinterpret_cast<void**>(&device), kBytes));
  transport_testing::TestContext ctx(1);
  CudaIpcTransport transport{CudaIpcTransportOptions{}};
  ASSERT_TRUE(transport.Start(&ctx, TransportStartInfo{}).ok());
  std::vector<unsigned char> host(4096);
  EXPECT_EQ(StatusCode::kNotFound, transport
                                       .RegisterMemory(Addr(host.data()), host.size(),
                                                       Location::Cpu(), MemoryAccess::kRemote)
                                       .status()
                                       .code());
  Result<std::string> key = transport.RegisterMemory(Addr(device + 4096), kBytes / 2,
                                                     Location::Cuda(0), MemoryAccess::kRemote);
  ASSERT_TRUE(key.ok()) << key.status();
  Result<cuda_ipc::RegionKey> decoded = cuda_ipc::DecodeKey(*key);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(Addr(device), decoded->alloc_base);
  EXPECT_GE(decoded->alloc_size, kBytes);
  EXPECT_EQ(Addr(device + 4096), decoded->region_addr);
  EXPECT_EQ(kBytes / 2, decoded->region_length);
  // A location that is not the memory's device; a range leaving the allocation.
  if (cuda::DeviceCount() == 1) {
    EXPECT_EQ(StatusCode::kInvalidArgument,
              transport.RegisterMemory(Addr(device), 4096, Location::Cuda(1), MemoryAccess::kRemote)
                  .status()
                  .code());
  }
  EXPECT_FALSE(transport
                   .RegisterMemory(Addr(device + 4096), decoded->alloc_size, Location::Cuda(0),
                                   MemoryAccess::kRemote)
                   .ok());
  transport.Stop();
  cudaFree(device);
}

#endif

}  // namespace
}  // namespace ferry
