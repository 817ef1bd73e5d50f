#include "core/location.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <string>

#include "common/log.h"

namespace ferry {
namespace {

constexpr std::string_view kAcceptedForms =
    "accepted: cpu, cpu:<numa>, cuda:<n>, rocm:<n>, ascend:<n>, * (detect)";
constexpr int32_t kMaxIndex = 65535;

struct KindName {
  Location::Kind kind;
  std::string_view name;
};
constexpr KindName kKindNames[] = {{Location::Kind::kCpu, "cpu"},
                                   {Location::Kind::kCuda, "cuda"},
                                   {Location::Kind::kRocm, "rocm"},
                                   {Location::Kind::kAscend, "ascend"}};

Status BadLocation(std::string_view text, std::string_view why) {
  std::string shown(text.substr(0, 64));
  if (text.size() > 64) shown += "...";
  return InvalidArgumentError("bad location '" + shown + "' (" + std::string(why) + "; " +
                              std::string(kAcceptedForms) + ")");
}

// Strict decimal: digits only, no sign, no leading zeros, <= kMaxIndex.
bool ParseIndex(std::string_view digits, int32_t* out) {
  if (digits.empty() || digits.size() > 5) return false;
  if (digits.size() > 1 && digits[0] == '0') return false;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
  }
  int32_t value = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || value > kMaxIndex) return false;
  *out = value;
  return true;
}

// get_mempolicy(2) flags, spelled here so that no libnuma is needed.
constexpr int kMpolFNode = 1 << 0;
constexpr int kMpolFAddr = 1 << 1;

}  // namespace

Result<Location> Location::Parse(std::string_view text) {
  if (text == "*") return Location::Detect();
  const size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  for (const KindName& k : kKindNames) {
    if (name != k.name) continue;
    if (colon == std::string_view::npos) {
      if (k.kind == Kind::kCpu) return Location::Cpu();
      return BadLocation(text, "a device location needs an index");
    }
    int32_t index = 0;
    if (!ParseIndex(text.substr(colon + 1), &index)) {
      return BadLocation(text, "the index must be a decimal 0..65535 without leading zeros");
    }
    return Location{k.kind, index};
  }
  return BadLocation(text, text.empty() ? "empty" : "unknown memory kind");
}

std::string Location::ToString() const {
  if (kind == Kind::kDetect) return "*";
  for (const KindName& k : kKindNames) {
    if (k.kind != kind) continue;
    std::string out(k.name);
    if (index != kAnyIndex) out += ":" + std::to_string(index);
    return out;
  }
  return "?";
}

int OnlineNumaNodeCount() {
  // "/sys/devices/system/node/online" reads like "0" or "0-1" or "0,2-3".
  static const int count = [] {
    std::ifstream in("/sys/devices/system/node/online");
    std::string ranges;
    if (!(in >> ranges)) return 1;
    int total = 0;
    size_t pos = 0;
    while (pos < ranges.size()) {
      size_t comma = ranges.find(',', pos);
      if (comma == std::string::npos) comma = ranges.size();
      const std::string part = ranges.substr(pos, comma - pos);
      const size_t dash = part.find('-');
      if (dash == std::string::npos) {
        total += 1;
      } else {
        total += std::stoi(part.substr(dash + 1)) - std::stoi(part.substr(0, dash)) + 1;
      }
      pos = comma + 1;
    }
    return total > 0 ? total : 1;
  }();
  return count;
}

Result<Location> DetectHostLocation(const void* addr) {
  if (addr == nullptr) return InvalidArgumentError("cannot detect the location of a null pointer");
  const long page = sysconf(_SC_PAGESIZE);
  void* page_start = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(addr) &
                                             ~static_cast<uintptr_t>(page - 1));
  // mincore() fails with ENOMEM exactly when the page is not mapped: this validates the address
  // without touching it.
  unsigned char resident = 0;
  if (mincore(page_start, static_cast<size_t>(page), &resident) != 0) {
    if (errno == ENOMEM) {
      return InvalidArgumentError("address " + std::to_string(reinterpret_cast<uintptr_t>(addr)) +
                                  " is not mapped in this process");
    }
  }
  if (OnlineNumaNodeCount() <= 1) return Location::CpuNuma(0);

  // move_pages(2) with nodes == NULL only queries: status[0] is the node, or -ENOENT when the
  // page has not been faulted in yet.
  void* pages[1] = {page_start};
  int status[1] = {-1};
  if (syscall(SYS_move_pages, 0, 1UL, pages, nullptr, status, 0) == 0 && status[0] >= 0) {
    return Location::CpuNuma(status[0]);
  }
  if (status[0] != -ENOENT) {
    FERRY_LOG(kDebug) << "move_pages query failed (status " << status[0]
                      << "); falling back to get_mempolicy";
  }
  int node = -1;
  if (syscall(SYS_get_mempolicy, &node, nullptr, 0UL, page_start, kMpolFNode | kMpolFAddr) == 0 &&
      node >= 0) {
    return Location::CpuNuma(node);
  }
  if (errno == ENOSYS) return Location::CpuNuma(0);
  return InvalidArgumentError("cannot detect the NUMA node of address " +
                              std::to_string(reinterpret_cast<uintptr_t>(addr)) + ": " +
                              ErrnoText(errno));
}

}  // namespace ferry
