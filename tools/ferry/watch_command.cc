// `ferry watch` (commands.h): follows the segments under "<prefix>/ram/" and prints one line per
// change. Where the store can push changes (etcd's watch stream, redis keyspace notifications:
// MetadataStore::watcher()) it follows them as they come; otherwise (an HTTP metadata server)
// it lists the prefix every --interval and prints the differences. The watch starts before the
// first listing, so nothing between the two is missed (a change may be reported once more, and
// a value equal to the one known is never reported).
//
// Lines: "<time> <event> <segment> <details>", event one of
//   present    in the store when the watch began
//   added      a new segment
//   restarted  the same name, another incarnation (the engine restarted)
//   changed    the same incarnation, other buffers: "+0x1000+4096 gen 3" registered,
//              "-0x1000+4096 gen 2" unregistered
//   removed    its entry left the store (clean stop, or its lease expired)
//   malformed  its entry does not decode (the field that failed)
// Runs for --duration, or until SIGINT or SIGTERM (exit 0).
#include <signal.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "commands.h"
#include "common/mutex.h"
#include "metadata/segment_directory.h"
#include "segment_view.h"
#include "store_access.h"
#include "text_table.h"

namespace ferry::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::string Now() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm local{};
  localtime_r(&ts.tv_sec, &local);
  char text[32];
  std::snprintf(text, sizeof(text), "%02d:%02d:%02d.%03ld", local.tm_hour, local.tm_min,
                local.tm_sec, ts.tv_nsec / 1000000);
  return text;
}

std::string Summary(const SegmentDesc& d) {
  return "incarnation " + std::to_string(d.incarnation) + ", " + std::to_string(d.buffers.size()) +
         " buffers, " + HumanBytes(SegmentBytes(d)) + ", generation " +
         std::to_string(SegmentGeneration(d)) + ", rpc " + d.rpc.host + ":" +
         std::to_string(d.rpc.port);
}

// "+0x1000+4096 gen 3, -0x1000+4096 gen 2": the buffers only one side has.
std::string BufferDiff(const SegmentDesc& before, const SegmentDesc& after) {
  using Key = std::tuple<uint64_t, uint64_t, uint64_t>;
  auto keys = [](const SegmentDesc& d) {
    std::set<Key> out;
    for (const BufferDesc& b : d.buffers) out.emplace(b.addr, b.length, b.generation);
    return out;
  };
  const std::set<Key> old_keys = keys(before);
  const std::set<Key> new_keys = keys(after);
  std::vector<std::string> parts;
  auto describe = [](char sign, const Key& k) {
    char text[96];
    std::snprintf(text, sizeof(text), "%c0x%llx+%llu gen %llu", sign,
                  static_cast<unsigned long long>(std::get<0>(k)),
                  static_cast<unsigned long long>(std::get<1>(k)),
                  static_cast<unsigned long long>(std::get<2>(k)));
    return std::string(text);
  };
  for (const Key& k : new_keys) {
    if (!old_keys.count(k)) parts.push_back(describe('+', k));
  }
  for (const Key& k : old_keys) {
    if (!new_keys.count(k)) parts.push_back(describe('-', k));
  }
  return parts.empty() ? "descriptor rewritten" : Join(parts, ", ");
}

// What the watch knows of each segment, and the line a new value makes.
// Thread contract: one thread (main's).
class SegmentTracker {
 public:
  // The segment's entry is now `value` (nullopt: deleted). Prints a line when that changes
  // what is known.
  void Apply(const std::string& name, const std::optional<std::string>& value,
             const char* first_event = "added") {
    auto it = known_.find(name);
    if (!value) {
      if (it == known_.end()) return;
      known_.erase(it);
      Print("removed", name, "");
      return;
    }
    if (it != known_.end() && it->second == *value) return;
    ListedSegment now = DecodeEntry(name, *value);
    std::optional<SegmentDesc> before;
    if (it != known_.end()) before = DecodeEntry(name, it->second).desc;
    const bool was_known = it != known_.end();
    known_[name] = *value;
    if (!now.desc) {
      Print("malformed", name, now.malformed.message());
    } else if (!was_known || !before) {
      Print(was_known ? "changed" : first_event, name, Summary(*now.desc));
    } else if (before->incarnation != now.desc->incarnation) {
      Print("restarted", name,
            "incarnation " + std::to_string(before->incarnation) + " -> " + Summary(*now.desc));
    } else {
      Print("changed", name, BufferDiff(*before, *now.desc) + "; " + Summary(*now.desc));
    }
  }

  // A full listing (polling): applies every entry and removes what is gone.
  void ApplyListing(const std::vector<KeyValue>& entries, size_t prefix_size,
                    const char* first_event = "added") {
    std::set<std::string> seen;
    for (const KeyValue& kv : entries) {
      if (kv.key.size() <= prefix_size) continue;
      std::string name = kv.key.substr(prefix_size);
      seen.insert(name);
      Apply(name, kv.value, first_event);
    }
    std::vector<std::string> gone;
    for (const auto& [name, value] : known_) {
      if (!seen.count(name)) gone.push_back(name);
    }
    for (const std::string& name : gone) Apply(name, std::nullopt);
  }

  size_t size() const { return known_.size(); }

 private:
  static void Print(const char* event, const std::string& name, const std::string& details) {
    std::printf("%s %-9s %s%s%s\n", Now().c_str(), event, Printable(name).c_str(),
                details.empty() ? "" : " ", Printable(details).c_str());
    std::fflush(stdout);
  }

  std::map<std::string, std::string> known_;  // name -> the entry's raw value
};

// Events from the store's watch thread, taken by main's thread. Bounded: past kMaxQueued
// waiting events or kMaxQueuedBytes of them (main's thread is behind, e.g. its stdout is blocked)
// new ones are dropped and the queue says so; main's thread then lists the store again instead
// (nothing is missed, and a store that changes faster than we print cannot grow this process
// without bound). Thread contract: thread-safe.
class EventQueue {
 public:
  static constexpr size_t kMaxQueued = 100000;
  static constexpr size_t kMaxQueuedBytes = size_t{256} << 20;

  void Push(const WatchEvent& event) {
    MutexLock lock(mu_);
    const size_t bytes = event.key.size() + event.value.size();
    if (events_.size() >= kMaxQueued || bytes_ + bytes > kMaxQueuedBytes) {
      overflowed_ = true;
      return;
    }
    bytes_ += bytes;
    events_.push_back(event);
  }
  // The waiting events; *overflowed: some were dropped since the last call.
  std::deque<WatchEvent> TakeAll(bool* overflowed) {
    MutexLock lock(mu_);
    *overflowed = std::exchange(overflowed_, false);
    bytes_ = 0;
    return std::exchange(events_, {});
  }

 private:
  Mutex mu_;
  std::deque<WatchEvent> events_ GUARDED_BY(mu_);
  size_t bytes_ GUARDED_BY(mu_) = 0;  // keys and values waiting in events_
  bool overflowed_ GUARDED_BY(mu_) = false;
};

// Waits up to `wait` for SIGINT or SIGTERM (blocked in every thread); true when one came.
bool StopSignal(const sigset_t& signals, std::chrono::milliseconds wait) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count();
  timespec timeout{.tv_sec = static_cast<time_t>(ns / 1000000000),
                   .tv_nsec = static_cast<long>(ns % 1000000000)};
  return sigtimedwait(&signals, nullptr, &timeout) > 0;
}

}  // namespace

int RunWatch(const StoreFlags& flags, const WatchFlags& watch) {
  // Blocked before the store starts any thread, so every thread inherits the mask and the
  // signals wait for sigtimedwait below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  int exit_code = kExitOk;
  std::unique_ptr<MetadataStore> store = OpenStore(flags, &exit_code);
  if (store == nullptr) return exit_code;
  const std::string ram_prefix = SegmentDescKey(flags.prefix, "");

  EventQueue queue;
  std::unique_ptr<WatchHandle> handle;
  std::string mode = "polling every " + std::to_string(watch.interval.count()) + " ms";
  if (Watcher* watcher = store->watcher(); watcher != nullptr && !watch.poll) {
    Result<std::unique_ptr<WatchHandle>> started =
        watcher->Watch(ram_prefix, [&queue](const WatchEvent& event) { queue.Push(event); });
    if (started.ok()) {
      handle = std::move(started).value();
      mode = "store watch";
    } else {
      std::fprintf(stderr, "ferry: the store's watch did not start (%s); polling instead\n",
                   Printable(started.status().message()).c_str());
    }
  }
  Result<std::vector<KeyValue>> listing = store->List(ram_prefix);
  if (!listing.ok()) {
    return Fail(kExitStoreUnreachable, "listing segments in " + flags.connection, listing.status());
  }
  SegmentTracker tracker;
  std::printf("%s watching %s (%s)\n", Now().c_str(), flags.connection.c_str(), mode.c_str());
  tracker.ApplyListing(*listing, ram_prefix.size(), "present");
  std::fflush(stdout);

  const auto deadline =
      watch.duration.count() > 0 ? Clock::now() + watch.duration : Clock::time_point::max();
  // With a store watch the loop wakes often to print events; polling wakes once per interval.
  const std::chrono::milliseconds tick =
      handle != nullptr ? std::chrono::milliseconds(50) : watch.interval;
  auto next_poll = Clock::now() + watch.interval;
  bool store_down = false;
  bool resync = false;  // store watch: events were dropped; list the store until that works
  while (true) {
    const auto now = Clock::now();
    if (now >= deadline) break;
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    if (wait > tick) wait = tick;
    if (StopSignal(stop_signals, wait)) break;
    if (handle != nullptr) {
      bool dropped = false;
      for (const WatchEvent& event : queue.TakeAll(&dropped)) {
        if (event.key.size() <= ram_prefix.size()) continue;
        const std::string name = event.key.substr(ram_prefix.size());
        tracker.Apply(name, event.type == WatchEvent::Type::kPut
                                ? std::optional<std::string>(event.value)
                                : std::nullopt);
      }
      resync = resync || dropped;
      if (!resync) continue;
    } else if (Clock::now() < next_poll) {
      continue;
    }
    next_poll = Clock::now() + watch.interval;
    Result<std::vector<KeyValue>> poll = store->List(ram_prefix);
    if (!poll.ok()) {
      // Reported once per outage; what is known stays until the store answers again.
      if (!store_down) {
        std::printf("%s store unreachable: %s\n", Now().c_str(),
                    Printable(poll.status().message()).c_str());
        std::fflush(stdout);
      }
      store_down = true;
      continue;
    }
    resync = false;
    if (store_down) {
      std::printf("%s store reachable again\n", Now().c_str());
      store_down = false;
    }
    tracker.ApplyListing(*poll, ram_prefix.size());
  }
  handle.reset();  // no callback runs after this
  return kExitOk;
}

}  // namespace ferry::cli
