// CxlWindow (mapping a window file twice), CxlAllocator (first fit across mappings through
// byte-range locks) and the endpoint/key codec.
#include "transport/cxl/cxl_window.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <vector>

#include "transport/cxl/cxl_allocator.h"
#include "transport/cxl/cxl_test_support.h"
#include "transport/cxl/cxl_wire.h"

namespace ferry::cxl {
namespace {

using testing::Addr;
using testing::kMiB;
using testing::TempWindowFile;

std::unique_ptr<CxlWindow> MustOpen(const std::string& path, uint64_t size) {
  Result<std::unique_ptr<CxlWindow>> window = CxlWindow::Open(path, size);
  EXPECT_TRUE(window.ok()) << window.status();
  return window.ok() ? std::move(window).value() : nullptr;
}

TEST(CxlWindowTest, RefusesWhatCannotBeAWindow) {
  EXPECT_EQ(CxlWindow::Open("", 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CxlWindow::Open("/dev/shm/ferry-cxl-no-such-window", kMiB).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(CxlWindow::Open("/dev/shm", kMiB).status().code(), StatusCode::kInvalidArgument);
  TempWindowFile empty;
  Result<std::unique_ptr<CxlWindow>> unsized = CxlWindow::Open(empty.path(), 0);
  EXPECT_EQ(unsized.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unsized.status().message().find(empty.path()), std::string::npos) << unsized.status();
}

TEST(CxlWindowTest, GrowsAShortFileAndMapsItsSizeWhenAskedForNone) {
  TempWindowFile file;
  std::unique_ptr<CxlWindow> grown = MustOpen(file.path(), 4 * kMiB);
  ASSERT_NE(grown, nullptr);
  struct stat st = {};
  ASSERT_EQ(0, stat(file.path().c_str(), &st));
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 4 * kMiB);
  EXPECT_EQ(grown->size(), 4 * kMiB);
  EXPECT_FALSE(grown->synchronous()) << "tmpfs has no MAP_SYNC";
  std::unique_ptr<CxlWindow> whole = MustOpen(file.path(), 0);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->size(), 4 * kMiB);
  std::unique_ptr<CxlWindow> smaller = MustOpen(file.path(), kMiB);  // never shrinks the file
  ASSERT_NE(smaller, nullptr);
  ASSERT_EQ(0, stat(file.path().c_str(), &st));
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 4 * kMiB);
  EXPECT_FALSE(smaller->identity().SameWindowAs(whole->identity())) << "sizes differ";
}

TEST(CxlWindowTest, TwoMappingsOfOneFileShareBytesAtEqualOffsets) {
  TempWindowFile file;
  std::unique_ptr<CxlWindow> a = MustOpen(file.path(), 2 * kMiB);
  std::unique_ptr<CxlWindow> b = MustOpen(file.path(), 2 * kMiB);
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->base(), b->base());
  EXPECT_TRUE(a->identity().SameWindowAs(b->identity()));
  std::memcpy(a->base() + 12345, "through the window", 18);
  EXPECT_EQ(0, std::memcmp(b->base() + 12345, "through the window", 18));

  EXPECT_TRUE(a->Contains(Addr(a->base()), 2 * kMiB));
  EXPECT_TRUE(a->Contains(Addr(a->base()) + 2 * kMiB - 1, 1));
  EXPECT_FALSE(a->Contains(Addr(a->base()) + 2 * kMiB - 1, 2));
  EXPECT_FALSE(a->Contains(Addr(a->base()) - 1, 2));
  EXPECT_FALSE(a->Contains(Addr(a->base()), 0));
  EXPECT_FALSE(a->Contains(Addr(a->base()) + 10, ~uint64_t{0}));
  EXPECT_EQ(a->OffsetOf(Addr(a->base()) + 77), 77u);

  TempWindowFile other;
  std::unique_ptr<CxlWindow> c = MustOpen(other.path(), 2 * kMiB);
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(a->identity().SameWindowAs(c->identity()));
}

TEST(CxlAllocatorTest, AllocatorsOfTwoMappingsNeverOverlapAndFreedRangesComeBack) {
  TempWindowFile file;
  std::unique_ptr<CxlWindow> wa = MustOpen(file.path(), kMiB);
  std::unique_ptr<CxlWindow> wb = MustOpen(file.path(), kMiB);
  ASSERT_TRUE(wa && wb);
  CxlAllocator a(wa.get());
  CxlAllocator b(wb.get());
  // Interleave allocations from both; every one is a distinct window range.
  std::set<std::pair<uint64_t, uint64_t>> ranges;  // {offset, length}
  std::vector<void*> from_a;
  for (int i = 0; i < 20; ++i) {
    Result<void*> pa = a.Allocate(1000 + i);
    Result<void*> pb = b.Allocate(3000);
    ASSERT_TRUE(pa.ok() && pb.ok()) << pa.status() << pb.status();
    EXPECT_EQ(Addr(*pa) % CxlAllocator::kAlignment, 0u);
    ranges.insert({wa->OffsetOf(Addr(*pa)), 1000 + i});
    ranges.insert({wb->OffsetOf(Addr(*pb)), 3000});
    from_a.push_back(*pa);
  }
  uint64_t end = 0;
  for (const auto& [offset, length] : ranges) {
    EXPECT_GE(offset, end) << "two allocations overlap";
    end = offset + length;
  }
  EXPECT_EQ(a.Free(from_a[0]).code(), StatusCode::kOk);
  EXPECT_EQ(a.Free(from_a[0]).code(), StatusCode::kNotFound) << "double free";
  EXPECT_EQ(b.Free(from_a[1]).code(), StatusCode::kNotFound) << "not b's allocation";
  // The first range is free again, and first fit finds it, from either mapping.
  Result<void*> again = b.Allocate(64);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(wb->OffsetOf(Addr(*again)), 0u);
}

TEST(CxlAllocatorTest, FullWindowIsAgainUntilAnotherMappingLetsGo) {
  TempWindowFile file;
  std::unique_ptr<CxlWindow> wa = MustOpen(file.path(), kMiB);
  std::unique_ptr<CxlWindow> wb = MustOpen(file.path(), kMiB);
  ASSERT_TRUE(wa && wb);
  CxlAllocator b(wb.get());
  EXPECT_EQ(b.Allocate(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(b.Allocate(kMiB + 1).status().code(), StatusCode::kInvalidArgument);
  {
    auto a = std::make_unique<CxlAllocator>(wa.get());
    ASSERT_TRUE(a->Allocate(kMiB / 2).ok());
    ASSERT_TRUE(a->Allocate(kMiB / 4).ok());
    EXPECT_EQ(a->allocated_bytes(), 3 * kMiB / 4);
    Result<void*> rest = b.Allocate(kMiB / 4);
    ASSERT_TRUE(rest.ok()) << rest.status();
    EXPECT_EQ(wb->OffsetOf(Addr(*rest)), 3 * kMiB / 4);
    EXPECT_EQ(b.Allocate(64).status().code(), StatusCode::kAgain);
  }  // a's allocator goes: its ranges are unlocked
  Result<void*> reused = b.Allocate(kMiB / 2);
  ASSERT_TRUE(reused.ok()) << reused.status();
  EXPECT_EQ(wb->OffsetOf(Addr(*reused)), 0u);
}

TEST(CxlAllocatorTest, RangesOfAnEngineThatDiesAreFreed) {
  TempWindowFile file;
  std::unique_ptr<CxlWindow> wb = MustOpen(file.path(), kMiB);
  ASSERT_NE(wb, nullptr);
  CxlAllocator b(wb.get());
  int ready[2];
  int go[2];
  ASSERT_EQ(0, pipe(ready));
  ASSERT_EQ(0, pipe(go));
  const pid_t child = fork();  // this test runs no other thread
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child takes the whole window and dies without freeing anything.
    Result<std::unique_ptr<CxlWindow>> wa = CxlWindow::Open(file.path(), kMiB);
    char ok = 0;
    if (wa.ok()) ok = (new CxlAllocator(wa->get()))->Allocate(kMiB).ok() ? 1 : 0;  // NOLINT
    (void)!write(ready[1], &ok, 1);
    (void)!read(go[0], &ok, 1);
    _exit(0);
  }
  char ok = 0;
  ASSERT_EQ(1, read(ready[0], &ok, 1));
  ASSERT_EQ(1, ok) << "the child could not allocate";
  EXPECT_EQ(b.Allocate(64).status().code(), StatusCode::kAgain);
  ASSERT_EQ(1, write(go[1], &ok, 1));
  int wstatus = 0;
  ASSERT_EQ(child, waitpid(child, &wstatus, 0));
  for (int fd : {ready[0], ready[1], go[0], go[1]}) close(fd);
  EXPECT_TRUE(b.Allocate(kMiB).ok()) << "a dead engine's ranges stayed taken";
}

TEST(CxlWireTest, EndpointAndKeyRoundTripAndDecodeStrictly) {
  Endpoint e;
  e.window = {"/dev/dax0.0", 1ull << 30, 7, 99};
  e.base = 0x7f0000000000;
  e.grant_path = "/dev/shm/ferry-cxl-1-2.sock";
  const std::string bytes = EncodeEndpoint(e);
  Result<Endpoint> back = DecodeEndpoint(bytes);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->window.path, e.window.path);
  EXPECT_TRUE(back->window.SameWindowAs(e.window));
  EXPECT_EQ(back->base, e.base);
  EXPECT_EQ(back->grant_path, e.grant_path);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(DecodeEndpoint(bytes.substr(0, n)).status().code(), StatusCode::kInvalidArgument)
        << "truncated at " << n;
  }
  EXPECT_FALSE(DecodeEndpoint(bytes + "x").ok());
  std::string bad_version = bytes;
  bad_version[4] = 2;
  EXPECT_FALSE(DecodeEndpoint(bad_version).ok());
  Endpoint wraps = e;
  wraps.base = ~uint64_t{0} - 10;
  EXPECT_FALSE(DecodeEndpoint(EncodeEndpoint(wraps)).ok());
  Endpoint empty_size = e;
  empty_size.window.size = 0;
  EXPECT_FALSE(DecodeEndpoint(EncodeEndpoint(empty_size)).ok());
  Endpoint no_socket = e;
  no_socket.grant_path.clear();
  EXPECT_FALSE(DecodeEndpoint(EncodeEndpoint(no_socket)).ok());

  const std::string key = EncodeKey({4096, 100});
  Result<RegionKey> k = DecodeKey(key);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(k->offset, 4096u);
  EXPECT_EQ(k->length, 100u);
  for (size_t n = 0; n < key.size(); ++n) EXPECT_FALSE(DecodeKey(key.substr(0, n)).ok());
  EXPECT_FALSE(DecodeKey(key + "x").ok());
  EXPECT_FALSE(DecodeKey(EncodeKey({1, 0})).ok());
  EXPECT_FALSE(DecodeKey(EncodeKey({~uint64_t{0}, 2})).ok());
  EXPECT_FALSE(DecodeKey(bytes).ok()) << "an endpoint is not a key";
}

}  // namespace
}  // namespace ferry::cxl
