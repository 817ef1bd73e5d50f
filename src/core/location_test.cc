#include "core/location.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <string_view>

namespace ferry {
namespace {

TEST(LocationTest, EveryAcceptedFormRoundTrips) {
  const std::pair<std::string_view, Location> kForms[] = {
      {"cpu", Location::Cpu()},
      {"cpu:0", Location::CpuNuma(0)},
      {"cpu:3", Location::CpuNuma(3)},
      {"cpu:65535", Location::CpuNuma(65535)},
      {"cuda:0", Location::Cuda(0)},
      {"cuda:7", Location::Cuda(7)},
      {"cuda:65535", Location::Cuda(65535)},
      {"rocm:0", Location::Rocm(0)},
      {"rocm:12", Location::Rocm(12)},
      {"ascend:0", Location::Ascend(0)},
      {"ascend:15", Location::Ascend(15)},
      {"*", Location::Detect()},
  };
  for (const auto& [text, expected] : kForms) {
    Result<Location> parsed = Location::Parse(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    EXPECT_EQ(*parsed, expected) << text;
    EXPECT_EQ(parsed->ToString(), text);
    EXPECT_EQ(expected.ToString(), text);
  }
}

TEST(LocationTest, RejectsEverythingElseAndListsTheAcceptedForms) {
  const std::string_view kBad[] = {"",
                                   "gpu:0",
                                   "cpu:",
                                   "cpu:-1",
                                   "cpu:01",
                                   "cuda",
                                   "cuda:",
                                   "cuda:65536",
                                   "cuda:1x",
                                   " cpu",
                                   "cpu:0 ",
                                   "CPU",
                                   "Cuda:0",
                                   "cpu:+1",
                                   "cpu:0:1",
                                   "**",
                                   "cpu:99999999999999999999"};
  for (std::string_view text : kBad) {
    Result<Location> parsed = Location::Parse(text);
    ASSERT_FALSE(parsed.ok()) << "accepted '" << text << "'";
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find(
                  "accepted: cpu, cpu:<numa>, cuda:<n>, rocm:<n>, ascend:<n>, * (detect)"),
              std::string::npos)
        << parsed.status();
  }
}

TEST(LocationTest, DetectsStackAndHeapAsHostMemory) {
  int on_stack = 0;
  auto on_heap = std::make_unique<int>(0);
  for (const void* p :
       {static_cast<const void*>(&on_stack), static_cast<const void*>(on_heap.get())}) {
    Result<Location> loc = DetectHostLocation(p);
    ASSERT_TRUE(loc.ok()) << loc.status();
    EXPECT_EQ(loc->kind, Location::Kind::kCpu);
    EXPECT_GE(loc->index, 0);
    if (OnlineNumaNodeCount() == 1) {
      EXPECT_EQ(*loc, Location::CpuNuma(0));
    }
  }
}

TEST(LocationTest, DetectRejectsNullAndUnmappedAddresses) {
  Result<Location> null_loc = DetectHostLocation(nullptr);
  ASSERT_FALSE(null_loc.ok());
  EXPECT_EQ(null_loc.status().code(), StatusCode::kInvalidArgument);

  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_EQ(munmap(p, page), 0);
  Result<Location> unmapped = DetectHostLocation(p);
  ASSERT_FALSE(unmapped.ok());
  EXPECT_EQ(unmapped.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unmapped.status().message().find("not mapped"), std::string::npos) << unmapped.status();
}

}  // namespace
}  // namespace ferry
