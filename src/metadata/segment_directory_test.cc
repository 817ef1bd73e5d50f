#include "metadata/segment_directory.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>

#include "common/clock.h"
#include "metadata/memory/memory_store.h"
#include "metadata/p2p/in_process_p2p.h"
#include "metadata/p2p/p2p_store.h"
#include "common/wait_for.h"

namespace ferry {
namespace {

using namespace std::chrono_literals;

// True when thread `tid` of this process is asleep (state S in /proc). The threads a test asks
// this about have nothing to sleep on but the directory's wait for another thread's fetch.
bool Asleep(pid_t tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t name_end = line.rfind(')');  // "<tid> (<name>) <state> ..."
  return name_end != std::string::npos && name_end + 2 < line.size() && line[name_end + 2] == 'S';
}

// Decorator: counts Gets, can hold them back or fail them (`down`: the store cannot be reached),
// and can hide the watcher (a store without watch).
class CountingStore final : public MetadataStore {
 public:
  CountingStore(MetadataStore* inner, bool hide_watch) : inner_(inner), hide_watch_(hide_watch) {}
  std::string_view scheme() const override { return inner_->scheme(); }
  Result<std::string> Get(std::string_view key) override {
    gets++;
    if (before_get) before_get();
    if (down.load()) return UnavailableError("store down");
    return inner_->Get(key);
  }
  Status Put(std::string_view key, std::string_view value, const PutOptions& o) override {
    return inner_->Put(key, value, o);
  }
  Status Delete(std::string_view key) override { return inner_->Delete(key); }
  Status DeleteIf(std::string_view key, std::string_view expected) override {
    return inner_->DeleteIf(key, expected);
  }
  Result<std::vector<KeyValue>> List(std::string_view prefix) override {
    return inner_->List(prefix);
  }
  Watcher* watcher() override { return hide_watch_ ? nullptr : inner_->watcher(); }
  bool TakenOver(std::string_view key) const override { return inner_->TakenOver(key); }
  void Abandon() override { inner_->Abandon(); }

  std::atomic<int> gets{0};
  std::atomic<bool> down{false};
  std::function<void()> before_get;  // runs in every Get before it reads; set before use

 private:
  MetadataStore* inner_;
  bool hide_watch_;
};

SegmentDesc MakeDesc(std::string name, uint64_t incarnation, int buffers = 1) {
  SegmentDesc desc;
  desc.name = std::move(name);
  desc.incarnation = incarnation;
  desc.rpc = {"127.0.0.1", 4242};
  for (int i = 0; i < buffers; ++i) {
    BufferDesc b;
    b.addr = 0x10000 + static_cast<uint64_t>(i) * 0x1000;
    b.length = 0x1000;
    b.location = Location::CpuNuma(0);
    b.generation = static_cast<uint64_t>(i) + 1;
    b.keys["tcp"] = "k";
    desc.buffers.push_back(b);
  }
  return desc;
}

class SegmentDirectoryTest : public ::testing::Test {
 protected:
  // A fresh shared backend per test: the owner's client and the reader's client.
  void SetUp() override {
    backend_ = "dir-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
    owner_ = Client();
    reader_ = Client();
  }
  // Another client of this test's store: another engine. Leases follow the test's clock, so
  // they never expire; the lease refresh runs every lease_ttl / 3 all the same.
  std::unique_ptr<MetadataStore> Client(std::chrono::milliseconds lease_ttl = 1h) {
    return *CreateMemoryStore(backend_, {.lease_ttl = lease_ttl, .clock = &clock_});
  }
  std::unique_ptr<SegmentDirectory> MakeDirectory(CountingStore* store,
                                                  DirectoryOptions options = {}) {
    options.clock = &clock_;
    Result<std::unique_ptr<SegmentDirectory>> dir = SegmentDirectory::Create(store, options);
    EXPECT_TRUE(dir.ok()) << dir.status();
    return std::move(dir).value();
  }

  ManualClock clock_;
  std::string backend_;
  std::unique_ptr<MetadataStore> owner_;
  std::unique_ptr<MetadataStore> reader_;
};

TEST_F(SegmentDirectoryTest, OpenFetchesOnceThenServesTheCache) {
  SegmentPublisher publisher(owner_.get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-a", 7)).ok());
  CountingStore store(reader_.get(), /*hide_watch=*/true);
  auto dir = MakeDirectory(&store);
  Result<SegmentHandle> first = dir->Open("node-a");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->desc->incarnation, 7u);
  Result<SegmentHandle> again = dir->Open("node-a");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id, first->id);
  EXPECT_EQ(again->desc, first->desc);
  EXPECT_EQ(store.gets.load(), 1);
  Result<SegmentHandle> by_id = dir->Get(first->id);
  ASSERT_TRUE(by_id.ok());
  EXPECT_EQ(by_id->desc, first->desc);
  EXPECT_EQ(dir->Get(999).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(dir->Open("nobody").status().code(), StatusCode::kNotFound);
}

TEST_F(SegmentDirectoryTest, ManyThreadsOpeningOneNameCauseOneFetch) {
  SegmentPublisher publisher(owner_.get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc("busy", 1)).ok());
  CountingStore store(reader_.get(), /*hide_watch=*/true);
  // The fetch answers only once every thread is on its way in, so they all meet it in flight.
  std::atomic<int> opening{0};
  store.before_get = [&] { WaitFor([&] { return opening.load() == 16; }, 5s); };
  auto dir = MakeDirectory(&store);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      opening++;
      ok += dir->Open("busy").ok() ? 1 : 0;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 16);
  EXPECT_EQ(store.gets.load(), 1);
}

TEST_F(SegmentDirectoryTest, AFailedFetchIsSharedByItsWaiters) {
  CountingStore store(reader_.get(), /*hide_watch=*/true);
  std::atomic<bool> land{false};
  store.before_get = [&] { WaitFor([&] { return land.load(); }, 5s); };  // holds the flight
  auto dir = MakeDirectory(&store);
  std::atomic<int> not_found{0};
  std::vector<std::atomic<pid_t>> tids(8);
  auto open_ghost = [&](size_t t) {
    tids[t] = ::gettid();
    not_found += dir->Open("ghost").status().code() == StatusCode::kNotFound ? 1 : 0;
  };
  std::vector<std::thread> threads;
  threads.emplace_back(open_ghost, 0);
  EXPECT_TRUE(WaitFor([&] { return store.gets.load() == 1; }, 5s)) << "the first one fetches";
  // Each of the others joins the flight: asleep in Open, which is where it waits for it.
  for (size_t t = 1; t < tids.size(); ++t) {
    threads.emplace_back(open_ghost, t);
    EXPECT_TRUE(WaitFor([&] { return tids[t] != 0 && Asleep(tids[t]); }, 5s)) << "thread " << t;
  }
  land = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(not_found.load(), 8);
  EXPECT_EQ(store.gets.load(), 1);
}

TEST_F(SegmentDirectoryTest, SixteenThreadsOpenAHundredSegments) {
  SegmentPublisher publisher(owner_.get(), "ferry");
  for (int i = 0; i < 100; ++i) {
    // One publisher holds one name; write the others straight through the store.
    SegmentDesc desc = MakeDesc("seg-" + std::to_string(i), 100 + static_cast<uint64_t>(i));
    ASSERT_TRUE(owner_->Put(SegmentDescKey("ferry", desc.name), EncodeSegmentDesc(desc)).ok());
  }
  CountingStore store(reader_.get(), /*hide_watch=*/true);
  auto dir = MakeDirectory(&store);
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (unsigned t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int> order(100);
      for (int i = 0; i < 100; ++i) order[static_cast<size_t>(i)] = i;
      std::shuffle(order.begin(), order.end(), std::mt19937(t));
      for (int i : order) {
        Result<SegmentHandle> h = dir->Open("seg-" + std::to_string(i));
        if (!h.ok() || h->desc->incarnation != 100u + static_cast<uint64_t>(i)) errors++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(store.gets.load(), 100);
}

TEST_F(SegmentDirectoryTest, WithoutWatchAnEntryExpiresAfterItsTtl) {
  SegmentPublisher publisher(owner_.get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-a", 1)).ok());
  CountingStore store(reader_.get(), /*hide_watch=*/true);
  auto dir = MakeDirectory(&store, {.cache_ttl = 5000ms});
  ASSERT_TRUE(dir->Open("node-a").ok());
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-a", 1, 3)).ok());
  clock_.Advance(4000ms);
  EXPECT_EQ(dir->Open("node-a")->desc->buffers.size(), 1u);  // still cached
  clock_.Advance(1000ms);
  EXPECT_EQ(dir->Open("node-a")->desc->buffers.size(), 3u);  // refetched
  EXPECT_EQ(store.gets.load(), 2);
}

TEST_F(SegmentDirectoryTest, WatchEventsReplaceAndDropEntries) {
  SegmentPublisher publisher(owner_.get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-w", 1)).ok());
  CountingStore store(reader_.get(), /*hide_watch=*/false);
  auto dir = MakeDirectory(&store);
  ASSERT_TRUE(dir->watching());
  ASSERT_TRUE(dir->Open("node-w").ok());
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-w", 1, 2)).ok());
  EXPECT_TRUE(WaitFor([&] { return dir->Open("node-w")->desc->buffers.size() == 2; }, 5s));
  EXPECT_EQ(store.gets.load(), 1);  // the watch delivered it; no fetch
  ASSERT_TRUE(publisher.Remove().ok());
  EXPECT_TRUE(
      WaitFor([&] { return dir->Open("node-w").status().code() == StatusCode::kNotFound; }, 5s));
}

TEST_F(SegmentDirectoryTest, MalformedStoredValueIsAnErrorAndLeavesTheCacheUntouched) {
  SegmentPublisher publisher(owner_.get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-m", 5)).ok());
  CountingStore store(reader_.get(), /*hide_watch=*/false);
  auto dir = MakeDirectory(&store);
  Result<SegmentHandle> before = dir->Open("node-m");
  ASSERT_TRUE(before.ok());
  ASSERT_TRUE(
      owner_
          ->Put(SegmentDescKey("ferry", "node-later"), EncodeSegmentDesc(MakeDesc("node-later", 2)))
          .ok());
  ASSERT_TRUE(dir->Open("node-later").ok());  // cached, so only the watch can change it
  const int gets = store.gets.load();
  ASSERT_TRUE(owner_->Put(SegmentDescKey("ferry", "node-m"), "{\"schema_version\":1,").ok());
  // The watch delivers in order: once this later update is in, the malformed one came first.
  ASSERT_TRUE(owner_
                  ->Put(SegmentDescKey("ferry", "node-later"),
                        EncodeSegmentDesc(MakeDesc("node-later", 2, 3)))
                  .ok());
  ASSERT_TRUE(WaitFor([&] { return dir->Open("node-later")->desc->buffers.size() == 3; }, 5s));
  EXPECT_EQ(store.gets.load(), gets);
  EXPECT_EQ(dir->Open("node-m")->desc, before->desc) << "the malformed update was ignored";
  Status sync = dir->Sync("node-m");
  EXPECT_EQ(sync.code(), StatusCode::kInvalidArgument) << sync;
  Result<SegmentHandle> after = dir->Open("node-m");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->desc, before->desc);
  // A descriptor stored under another segment's name is rejected too.
  ASSERT_TRUE(
      owner_->Put(SegmentDescKey("ferry", "node-m"), EncodeSegmentDesc(MakeDesc("x", 1))).ok());
  EXPECT_EQ(dir->Sync("node-m").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dir->Open("node-m")->desc, before->desc);
}

TEST_F(SegmentDirectoryTest, ReplacementKeepsOldSnapshotsAndReportsRestarts) {
  SegmentPublisher publisher(owner_.get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-r", 11)).ok());
  CountingStore store(reader_.get(), /*hide_watch=*/true);
  std::vector<std::pair<uint64_t, uint64_t>> restarts;
  auto dir = MakeDirectory(&store, {.on_restarted = [&](std::string_view, uint64_t a, uint64_t b) {
    restarts.emplace_back(a, b);
  }});
  Result<SegmentHandle> old_handle = dir->Open("node-r");
  ASSERT_TRUE(old_handle.ok());
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-r", 12, 4)).ok());  // restarted, new buffers
  dir->Invalidate("node-r");
  Result<SegmentHandle> new_handle = dir->Open("node-r");
  ASSERT_TRUE(new_handle.ok());
  EXPECT_EQ(new_handle->id, old_handle->id);  // same name, same id
  EXPECT_EQ(new_handle->desc->incarnation, 12u);
  EXPECT_EQ(old_handle->desc->incarnation, 11u);  // the in-flight snapshot is unchanged
  EXPECT_EQ(old_handle->desc->buffers.size(), 1u);
  ASSERT_EQ(restarts.size(), 1u);
  EXPECT_EQ(restarts[0], (std::pair<uint64_t, uint64_t>{11, 12}));
  EXPECT_TRUE(dir->SyncAll().ok());
  EXPECT_EQ(store.gets.load(), 3);
}

TEST_F(SegmentDirectoryTest, CrashedOwnersEntryExpiresWithItsLease) {
  SegmentPublisher publisher(owner_.get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-c", 1)).ok());
  CountingStore store(reader_.get(), /*hide_watch=*/true);
  auto dir = MakeDirectory(&store);
  ASSERT_TRUE(dir->Open("node-c").ok());
  owner_->Abandon();  // the owner "dies": nothing refreshes its lease any more
  clock_.Advance(1h);
  EXPECT_EQ(dir->Sync("node-c").code(), StatusCode::kNotFound);
  EXPECT_EQ(dir->Open("node-c").status().code(), StatusCode::kNotFound);
}

// The store lost a live peer's keys (their TTL passed while it was down, or it restarted
// without them): the peer itself is asked, and while that very incarnation answers, the
// descriptor it serves is used, on cache expiry and on Sync alike, until the peer writes its keys
// again; a peer that does not answer, or answers as another incarnation, is gone.
TEST_F(SegmentDirectoryTest, NotFoundAsksThePeerWhetherItIsGone) {
  SegmentPublisher publisher(owner_.get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-d", 5)).ok());
  CountingStore store(reader_.get(), /*hide_watch=*/true);
  std::atomic<uint64_t> answering{5};  // the incarnation the peer answers with; 0: no answer
  std::atomic<int> buffers{1};         // what the peer serves
  std::atomic<int> asked{0};
  auto dir = MakeDirectory(&store, {.cache_ttl = 1000ms,
                                    .ask_peer = [&](const SegmentDesc& cached)
                                        -> Result<std::string> {
                                      ++asked;
                                      EXPECT_EQ(cached.name, "node-d");
                                      if (answering.load() == 0) {
                                        return UnavailableError("connection refused");
                                      }
                                      return EncodeSegmentDesc(
                                          MakeDesc("node-d", answering.load(), buffers.load()));
                                    }});
  EXPECT_EQ(dir->Open("nobody").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(asked.load(), 0);  // nothing cached: nothing to ask
  ASSERT_TRUE(dir->Open("node-d").ok());
  ASSERT_TRUE(owner_->Delete(SegmentDescKey("ferry", "node-d")).ok());  // the store lost it
  clock_.Advance(1000ms);
  buffers = 2;  // the peer registered more meanwhile: what it serves is what counts
  Result<SegmentHandle> kept = dir->Open("node-d");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->desc->incarnation, 5u);
  EXPECT_EQ(kept->desc->buffers.size(), 2u);
  EXPECT_EQ(asked.load(), 1);
  EXPECT_TRUE(dir->Open("node-d").ok());  // fresh again for cache_ttl: nobody asked
  EXPECT_EQ(asked.load(), 1);
  // Sync (an explicit refresh, or the data path's after a transport failure) asks too.
  Status synced = dir->Sync("node-d");
  EXPECT_TRUE(synced.ok()) << synced;
  EXPECT_EQ(asked.load(), 2);
  // The peer wrote its keys again: fetched from the store as before.
  ASSERT_TRUE(owner_->Put(SegmentDescKey("ferry", "node-d"),
                          EncodeSegmentDesc(MakeDesc("node-d", 5, 3)), {})
                  .ok());
  EXPECT_TRUE(dir->Sync("node-d").ok());
  EXPECT_EQ(dir->Open("node-d")->desc->buffers.size(), 3u);
  EXPECT_EQ(asked.load(), 2);
  // Lost again, and the peer restarted (another incarnation answers): gone, on Sync too.
  ASSERT_TRUE(owner_->Delete(SegmentDescKey("ferry", "node-d")).ok());
  answering = 6;
  EXPECT_EQ(dir->Sync("node-d").code(), StatusCode::kNotFound);
  EXPECT_EQ(dir->Open("node-d").status().code(), StatusCode::kNotFound);
  // Lost, and the peer does not answer: gone.
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-d", 5, 4)).ok());
  ASSERT_TRUE(dir->Open("node-d").ok());
  ASSERT_TRUE(owner_->Delete(SegmentDescKey("ferry", "node-d")).ok());
  answering = 0;
  clock_.Advance(1000ms);
  EXPECT_EQ(dir->Open("node-d").status().code(), StatusCode::kNotFound);
}

// A delete event is the store's word, not the peer's: the entry is fetched at its next use, and
// that fetch asks the peer.
TEST_F(SegmentDirectoryTest, ADeleteEventAsksThePeerBeforeDropping) {
  SegmentPublisher publisher(owner_.get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-e", 7)).ok());
  CountingStore store(reader_.get(), /*hide_watch=*/false);
  std::atomic<bool> alive{true};
  auto dir = MakeDirectory(&store, {.ask_peer = [&](const SegmentDesc&) -> Result<std::string> {
                                      if (!alive.load()) return UnavailableError("refused");
                                      return EncodeSegmentDesc(MakeDesc("node-e", 7));
                                    }});
  ASSERT_TRUE(dir->watching());
  Result<SegmentHandle> opened = dir->Open("node-e");
  ASSERT_TRUE(opened.ok());
  ASSERT_TRUE(owner_->Delete(SegmentDescKey("ferry", "node-e")).ok());
  ASSERT_TRUE(WaitFor([&] { return !dir->Cached(opened->id).ok(); }, 5s));  // event seen
  Result<SegmentHandle> kept = dir->Open("node-e");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->desc->incarnation, 7u);
  // Deleted again, and this time the peer is gone.
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-e", 7, 2)).ok());
  ASSERT_TRUE(WaitFor([&] { return dir->Open("node-e")->desc->buffers.size() == 2; }, 5s));
  alive = false;
  ASSERT_TRUE(owner_->Delete(SegmentDescKey("ferry", "node-e")).ok());
  EXPECT_TRUE(
      WaitFor([&] { return dir->Open("node-e").status().code() == StatusCode::kNotFound; }, 5s));
}

// The store lost a peer's key and a fetch asks the peer; while its answer is on the way, another
// engine claims the name and a watch event installs it. The old peer's answer, arriving after,
// must not replace the new holder: that would report a restart new -> old (dropping the links to
// the new holder) and, with a watch, keep the old engine's descriptor for good.
TEST_F(SegmentDirectoryTest, APeerAnswerNeverReplacesANewerHolderInstalledMeanwhile) {
  SegmentPublisher old_holder(owner_.get(), "ferry");
  ASSERT_TRUE(old_holder.Publish(MakeDesc("node-t", 1)).ok());
  auto successor_store = Client();
  SegmentPublisher successor(successor_store.get(), "ferry");
  CountingStore store(reader_.get(), /*hide_watch=*/false);
  std::atomic<int> to_successor{0};
  std::atomic<int> back_to_old{0};
  std::atomic<bool> take_over_while_asked{false};
  auto dir = MakeDirectory(
      &store, {.on_restarted =
                   [&](std::string_view, uint64_t old_incarnation, uint64_t new_incarnation) {
                     if (old_incarnation == 1 && new_incarnation == 2) ++to_successor;
                     if (old_incarnation == 2 && new_incarnation == 1) ++back_to_old;
                   },
               .ask_peer = [&](const SegmentDesc& cached) -> Result<std::string> {
                 if (take_over_while_asked.exchange(false)) {
                   successor.AllowReplacing(RpcMetaKey("ferry", "node-t"),
                                            *reader_->Get(RpcMetaKey("ferry", "node-t")));
                   EXPECT_TRUE(successor.Publish(MakeDesc("node-t", 2)).ok());
                   EXPECT_TRUE(WaitFor([&] { return to_successor.load() == 1; }, 5s));
                 }
                 return EncodeSegmentDesc(MakeDesc("node-t", cached.incarnation));  // alive
               }});
  ASSERT_TRUE(dir->watching());
  Result<SegmentHandle> opened = dir->Open("node-t");
  ASSERT_TRUE(opened.ok());
  ASSERT_TRUE(owner_->Delete(SegmentDescKey("ferry", "node-t")).ok());  // the store lost it
  ASSERT_TRUE(WaitFor([&] { return !dir->Cached(opened->id).ok(); }, 5s));  // event seen
  take_over_while_asked = true;
  Result<SegmentHandle> got = dir->Open("node-t");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->desc->incarnation, 2u);
  EXPECT_EQ(dir->Open("node-t")->desc->incarnation, 2u);
  EXPECT_EQ(to_successor.load(), 1);
  EXPECT_EQ(back_to_old.load(), 0) << "the old peer's answer replaced the new holder";
}

// An engine whose name another engine took over never writes it again, not even while the
// store lacks the new holder's key (the store restarted without data, the holder stopped): its
// lease refresh, or its own conditional write, met the other engine's value, and from then on
// Publish fails AlreadyExists without writing. Only a new claim (AllowReplacing) writes it.
TEST_F(SegmentDirectoryTest, ANameTakenOverStaysLost) {
  const std::string desc_key = SegmentDescKey("ferry", "node-l");
  const std::string meta_key = RpcMetaKey("ferry", "node-l");
  auto take_over = [&](SegmentPublisher& by, uint64_t incarnation) {
    for (const std::string& key : {desc_key, meta_key}) {
      if (Result<std::string> held = reader_->Get(key); held.ok()) by.AllowReplacing(key, *held);
    }
    return by.Publish(MakeDesc("node-l", incarnation));
  };
  {
    // The loser's lease refresh (every 100 ms) sees the new holder's value.
    auto loser_store = Client(300ms);
    auto holder_store = Client();
    SegmentPublisher loser(loser_store.get(), "ferry");
    SegmentPublisher holder(holder_store.get(), "ferry");
    ASSERT_TRUE(loser.Publish(MakeDesc("node-l", 1)).ok());
    EXPECT_FALSE(loser.taken_over("node-l"));
    ASSERT_TRUE(take_over(holder, 2).ok());
    ASSERT_TRUE(WaitFor([&] { return loser.taken_over("node-l"); }, 5s));
    ASSERT_TRUE(reader_->Delete(desc_key).ok());  // the store lost the holder's key
    Status s = loser.Publish(MakeDesc("node-l", 1, 2));  // the loser registers more memory
    EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s;
    EXPECT_NE(s.message().find("was taken over by another engine"), std::string::npos) << s;
    EXPECT_EQ(reader_->Get(desc_key).status().code(), StatusCode::kNotFound)
        << "the engine that lost the name wrote it again";
    ASSERT_TRUE(holder.Publish(MakeDesc("node-l", 2, 2)).ok());  // the holder's next write
    EXPECT_EQ(DecodeSegmentDesc(*reader_->Get(desc_key))->incarnation, 2u);
    EXPECT_TRUE(loser.Remove().ok());  // the loser stops: the holder's entries stay
    EXPECT_TRUE(reader_->Get(desc_key).ok());
    EXPECT_EQ(*reader_->Get(meta_key), RpcMetaValue(MakeDesc("node-l", 2)));
    ASSERT_TRUE(holder.Remove().ok());
  }
  {
    // No refresh noticed (hour-long leases): the loser's conditional write meets the value.
    auto loser_store = Client();
    auto holder_store = Client();
    SegmentPublisher loser(loser_store.get(), "ferry");
    SegmentPublisher holder(holder_store.get(), "ferry");
    ASSERT_TRUE(loser.Publish(MakeDesc("node-l", 3)).ok());
    ASSERT_TRUE(take_over(holder, 4).ok());
    EXPECT_FALSE(loser.taken_over("node-l"));
    Status s = loser.Publish(MakeDesc("node-l", 3, 2));
    EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s;
    EXPECT_TRUE(loser.taken_over("node-l"));
    ASSERT_TRUE(reader_->Delete(desc_key).ok());
    ASSERT_TRUE(reader_->Delete(meta_key).ok());
    EXPECT_EQ(loser.Publish(MakeDesc("node-l", 3, 3)).code(), StatusCode::kAlreadyExists);
    EXPECT_EQ(reader_->Get(desc_key).status().code(), StatusCode::kNotFound);
    // A new claim writes it again.
    ASSERT_TRUE(holder.Publish(MakeDesc("node-l", 4, 2)).ok());
    Status claimed = take_over(loser, 3);
    EXPECT_TRUE(claimed.ok()) << claimed;
    EXPECT_FALSE(loser.taken_over("node-l"));
    EXPECT_EQ(DecodeSegmentDesc(*reader_->Get(desc_key))->incarnation, 3u);
  }
}

// An engine restarted in place (same host and port, new incarnation) takes its name over from
// the old process, which stops cleanly after: the old one's clean stop (Remove, then its store
// client's destructor) must not delete the successor's entries, rpc_meta included, although
// its rpc_meta names the same endpoint.
TEST_F(SegmentDirectoryTest, ACleanStopLeavesASuccessorsEntriesAtTheSameEndpoint) {
  SegmentPublisher old_engine(owner_.get(), "ferry");
  ASSERT_TRUE(old_engine.Publish(MakeDesc("node-r", 1)).ok());
  auto successor_store = Client();
  SegmentPublisher successor(successor_store.get(), "ferry");
  successor.AllowReplacing(SegmentDescKey("ferry", "node-r"),
                           *reader_->Get(SegmentDescKey("ferry", "node-r")));
  successor.AllowReplacing(RpcMetaKey("ferry", "node-r"),
                           *reader_->Get(RpcMetaKey("ferry", "node-r")));
  ASSERT_TRUE(successor.Publish(MakeDesc("node-r", 2)).ok());  // same endpoint
  EXPECT_NE(RpcMetaValue(MakeDesc("node-r", 1)), RpcMetaValue(MakeDesc("node-r", 2)));
  EXPECT_TRUE(old_engine.Remove().ok());
  owner_.reset();  // the old engine's store client goes too
  EXPECT_EQ(DecodeSegmentDesc(*reader_->Get(SegmentDescKey("ferry", "node-r")))->incarnation, 2u);
  Result<std::string> meta = reader_->Get(RpcMetaKey("ferry", "node-r"));
  ASSERT_TRUE(meta.ok()) << "the old engine's clean stop deleted its successor's rpc_meta";
  EXPECT_EQ(*meta, RpcMetaValue(MakeDesc("node-r", 2)));
}

// While the store cannot be asked, cached descriptors are served and the store is asked again
// only once per cache_ttl per segment (not on every request); Sync says Unavailable and keeps
// the descriptor.
TEST_F(SegmentDirectoryTest, AnUnreachableStoreIsAskedOncePerTtl) {
  SegmentPublisher publisher(owner_.get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-u", 3)).ok());
  CountingStore store(reader_.get(), /*hide_watch=*/true);
  Result<std::unique_ptr<SegmentDirectory>> dir =
      SegmentDirectory::Create(&store, {.cache_ttl = 1000ms, .clock = &clock_});
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE((*dir)->Open("node-u").ok());
  store.down = true;
  clock_.Advance(1000ms);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE((*dir)->Open("node-u").ok());
  EXPECT_EQ(store.gets.load(), 2);
  EXPECT_EQ((*dir)->Sync("node-u").code(), StatusCode::kUnavailable);
  EXPECT_EQ((*dir)->Open("node-u")->desc->incarnation, 3u);
  clock_.Advance(1000ms);
  EXPECT_TRUE((*dir)->Open("node-u").ok());
  EXPECT_EQ(store.gets.load(), 4);
  store.down = false;
}

TEST_F(SegmentDirectoryTest, PublisherRejectsInvalidDescriptorsAndWritesRpcMeta) {
  SegmentPublisher publisher(owner_.get(), "ferry");
  SegmentDesc bad = MakeDesc("node-p", 0);  // incarnation 0 is invalid
  EXPECT_EQ(publisher.Publish(bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(owner_->Get(SegmentDescKey("ferry", "node-p")).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(publisher.Publish(MakeDesc("node-p", 3)).ok());
  Result<std::string> meta = reader_->Get(RpcMetaKey("ferry", "node-p"));
  ASSERT_TRUE(meta.ok());
  EXPECT_EQ(*meta, R"({"incarnation":3,"ip_or_host_name":"127.0.0.1","rpc_port":4242})");
  EXPECT_EQ(publisher.publishes(), 1u);
}

TEST(P2PDirectoryTest, DescriptorsComeFromThePeerItself) {
  InProcessP2PNetwork network;
  auto a = CreateP2PStore(&network, {});
  auto b = CreateP2PStore(&network, {});
  ASSERT_TRUE(a.ok() && b.ok());
  const HostPort where{"127.0.0.1", 17001};
  network.Attach(where, static_cast<P2PStore*>(a->get()));
  SegmentPublisher publisher(a->get(), "ferry");
  ASSERT_TRUE(publisher.Publish(MakeDesc(where.ToString(), 9)).ok());

  auto dir = SegmentDirectory::Create(b->get(), {});
  ASSERT_TRUE(dir.ok());
  EXPECT_FALSE((*dir)->watching());
  Result<SegmentHandle> h = (*dir)->Open(where.ToString());
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->desc->incarnation, 9u);
  EXPECT_EQ((*dir)->Open("not-a-host-port").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*dir)->Open("127.0.0.1:17002").status().code(), StatusCode::kUnavailable);
  network.Detach(where);
  EXPECT_EQ((*dir)->Sync(where.ToString()).code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ferry
