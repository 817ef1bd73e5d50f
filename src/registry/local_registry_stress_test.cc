// Pins racing unregister and re-register. The invariant under test is the one the data path
// relies on: while a PinGuard is held, the region's unregister callbacks have not run (so its
// memory cannot have been freed), and a pin never lands on a closing region. Run under TSan by
// scripts/test.sh.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "registry/local_registry.h"
#include "common/wait_for.h"

namespace ferry {
namespace {

constexpr int kSlots = 64;
constexpr uint64_t kSlotSize = 4096;
constexpr uint64_t kBase = 0x100000;
// How much racing makes a run: the threads stop once each count is reached (or the bound
// passes, which fails the test), however fast or slow the machine.
constexpr uint64_t kPinsTaken = 50000;
constexpr uint64_t kPinsRefused = 500;
constexpr uint64_t kReregistrations = 10000;
constexpr std::chrono::seconds kBound{60};

// Stands in for the memory behind a region: `freed` is set by the unregister callback.
struct Slot {
  std::atomic<int> users{0};  // pins the test believes it holds on this slot
  std::atomic<bool> freed{false};
  std::atomic<uint64_t> generation{0};
};

TEST(LocalRegistryStressTest, PinsNeverOutliveTheirRegion) {
  LocalRegistry registry({.drain_timeout = std::chrono::milliseconds(10000)});
  std::vector<std::unique_ptr<Slot>> slots;
  std::atomic<int> violations{0};

  auto register_slot = [&](int i) {
    Slot* slot = slots[static_cast<size_t>(i)].get();
    RegionSpec spec;
    spec.addr = kBase + static_cast<uint64_t>(i) * kSlotSize;
    spec.length = kSlotSize;
    spec.location = Location::CpuNuma(0);
    spec.binding.transport = "tcp";
    spec.binding.on_unregister = [slot, &violations] {
      if (slot->users.load() != 0) violations++;  // freed under an access
      slot->freed = true;
      return Status::Ok();
    };
    slot->freed = false;
    Result<uint64_t> g = registry.Register(spec);
    if (!g.ok() || *g <= slot->generation.load()) violations++;  // generations only grow
    slot->generation = g.ok() ? *g : 0;
  };
  for (int i = 0; i < kSlots; ++i) {
    slots.push_back(std::make_unique<Slot>());
    register_slot(i);
  }

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> pins_taken{0};
  std::atomic<uint64_t> pins_refused{0};
  std::atomic<uint64_t> reregistrations{0};
  auto pinner = [&](unsigned seed) {
    std::mt19937_64 rng(seed);
    while (!stop.load(std::memory_order_relaxed)) {
      const int i = static_cast<int>(rng() % kSlots);
      const uint64_t offset = rng() % (kSlotSize - 64);
      Result<PinGuard> pin =
          registry.Pin(kBase + static_cast<uint64_t>(i) * kSlotSize + offset, 64);
      if (!pin.ok()) {
        const StatusCode code = pin.status().code();
        if (code != StatusCode::kStale && code != StatusCode::kNotFound) violations++;
        pins_refused++;
        continue;
      }
      Slot& slot = *slots[static_cast<size_t>(i)];
      slot.users++;
      if (slot.freed.load()) violations++;  // pinned memory already freed
      std::this_thread::yield();
      slot.users--;
      pin->Release();
      pins_taken++;
    }
  };
  auto churner = [&](unsigned seed) {
    std::mt19937_64 rng(seed);
    const int half = kSlots / 2;
    const int first = static_cast<int>(seed % 2) * half;  // two churners, disjoint halves
    while (!stop.load(std::memory_order_relaxed)) {
      const int i = first + static_cast<int>(rng() % half);
      Status s = registry.Unregister(kBase + static_cast<uint64_t>(i) * kSlotSize);
      if (!s.ok()) violations++;
      if (!slots[static_cast<size_t>(i)]->freed.load()) violations++;  // callback did not run
      register_slot(i);
      reregistrations++;
    }
  };

  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 4; ++t) threads.emplace_back(pinner, 100 + t);
  for (unsigned t = 0; t < 2; ++t) threads.emplace_back(churner, t);
  // Polled from this thread, which otherwise only waits: the racing threads never block on it.
  WaitFor(
      [&] {
        return pins_taken.load() >= kPinsTaken && pins_refused.load() >= kPinsRefused &&
               reregistrations.load() >= kReregistrations;
      },
      kBound, std::chrono::milliseconds(10));
  stop = true;
  for (auto& t : threads) t.join();

  EXPECT_EQ(violations.load(), 0);
  EXPECT_GE(pins_taken.load(), kPinsTaken);
  EXPECT_GE(pins_refused.load(), kPinsRefused);  // the race was really exercised
  EXPECT_GE(reregistrations.load(), kReregistrations);
  EXPECT_EQ(registry.size(), static_cast<size_t>(kSlots));
}

}  // namespace
}  // namespace ferry
