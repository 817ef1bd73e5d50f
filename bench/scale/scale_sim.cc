// ferry-scale-sim: the control plane of N engines against one real metadata store (issue 17).
//
// N simulated engines are split over P worker processes (the coordinator forks them before it
// starts any thread). Each simulated engine runs the metadata-plane parts a TransferEngine runs:
// a store client (CreateMetadataStore, with its lease keeper), a SegmentPublisher of its
// descriptor (B buffers) and a SegmentDirectory with the store's watch, through which it opens
// F peers. No data path and no RPC service. With --share=process the engines of one worker
// share one store client (one lease, one set of connections) and one directory (one watch,
// one cache), as a process-wide metadata plane would; --share=engine (the default) gives each
// engine its own, as TransferEngine does (what every process shares anyway stays shared: the
// etcd clients' lease and connections, the etcd and redis clients' watch streams).
//
// Phases, driven by the coordinator over one socketpair per worker (a line per command and per
// reply): setup (create + publish), cold opens (first Open of each peer: a store fetch), warm
// opens (cache hits), steady (engines touch their peers through Get(id) every 100 ms, as a data
// path does; the store's own request counter and CPU are read before and after), churn
// (register/unregister: each engine republishes with one buffer added or removed), storm (10% of
// engines restart at once: clean stop, new incarnation under the same name), teardown.
//
// The storm's planned requests: every engine that has a restarted peer open resolves it through
// its directory (Get(id)) every millisecond, plans a request against that descriptor's
// incarnation, and checks it the way the target does (TransferEngine's CheckRemoteIncarnation:
// a remote access planned against another incarnation than the live one is Stale). The live
// incarnation of every engine sits in a shared mapping the owners write (0 while stopped). A
// request planned against an old incarnation (one that stopped when the request reaches the
// target) and not refused would be "applied": must be 0. The check is the target's, so this
// counts what the directory hands the planner during a storm (how many requests are planned
// against stopped engines before the new incarnation is seen), and guards against a simulator
// or directory change that would plan against a descriptor the target no longer vouches for.
//
// The output is one CSV row (header with --csv-header) on stdout; progress goes to stderr.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/segment_desc.h"
#include "metadata/segment_directory.h"
#include "metadata/store_factory.h"

namespace ferry {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

struct Flags {
  std::string store;  // connection string
  int engines = 100;
  int procs = 4;
  int buffers = 10;
  int big_buffers = 0;  // engine 0's buffer count when > 0
  int fanout = 8;
  int keys = 1;     // transport keys per buffer (tcp, rdma, shm, ...)
  int threads = 4;  // per worker, for setup and cold opens
  std::string share = "engine";
  double steady_s = 10;
  double churn_s = 5;
  double churn_rate = 0.2;  // republishes per engine per second during churn
  double storm_fraction = 0.1;
  double storm_timeout_s = 20;
  int lease_ttl_ms = 10000;
  int cache_ttl_ms = 5000;
  int request_timeout_ms = 5000;
  int store_pid = 0;
  std::string store_stats_cmd;  // prints the store's total request count
  std::string label;
  bool csv_header = false;
  std::string prefix = "ferry-scale";
};

// ---- latency histogram (1% log buckets), mergeable across processes -------------------------

class Histogram {
 public:
  void Add(int64_t ns) {
    const int b = ns <= 1 ? 0 : static_cast<int>(std::log(static_cast<double>(ns)) / kLogBase);
    ++buckets_[b];
    ++count_;
    max_ = std::max(max_, ns);
  }
  void Merge(const Histogram& o) {
    for (const auto& [b, c] : o.buckets_) buckets_[b] += c;
    count_ += o.count_;
    max_ = std::max(max_, o.max_);
  }
  uint64_t count() const { return count_; }
  // The q-quantile in ns (bucket upper bound, so within 1%); 0 when empty.
  double Quantile(double q) const {
    if (count_ == 0) return 0;
    const uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(count_)));
    uint64_t seen = 0;
    for (const auto& [b, c] : buckets_) {
      seen += c;
      if (seen >= std::max<uint64_t>(rank, 1)) {
        return std::min(std::exp((b + 1) * kLogBase), static_cast<double>(max_));
      }
    }
    return static_cast<double>(max_);
  }
  std::string Serialize() const {
    std::string out = std::to_string(max_);
    for (const auto& [b, c] : buckets_) out += " " + std::to_string(b) + ":" + std::to_string(c);
    return out;
  }
  static Histogram Parse(std::istream& in) {
    Histogram h;
    in >> h.max_;
    std::string tok;
    while (in >> tok) {
      const size_t colon = tok.find(':');
      if (colon == std::string::npos) break;
      const uint64_t c = std::stoull(tok.substr(colon + 1));
      h.buckets_[std::stoi(tok.substr(0, colon))] += c;
      h.count_ += c;
    }
    return h;
  }

 private:
  static constexpr double kLogBase = 0.00995033;  // log(1.01)
  std::map<int, uint64_t> buckets_;
  uint64_t count_ = 0;
  int64_t max_ = 0;
};

// ---- a MetadataStore decorator counting the calls the metadata plane makes -------------------

class CountingStore final : public MetadataStore {
 public:
  CountingStore(std::unique_ptr<MetadataStore> inner, std::atomic<uint64_t>* calls)
      : inner_(std::move(inner)), calls_(calls) {}
  std::string_view scheme() const override { return inner_->scheme(); }
  Result<std::string> Get(std::string_view key) override {
    calls_->fetch_add(1);
    return inner_->Get(key);
  }
  Status Put(std::string_view key, std::string_view value, const PutOptions& options) override {
    calls_->fetch_add(1);
    return inner_->Put(key, value, options);
  }
  using MetadataStore::Put;
  Status Delete(std::string_view key) override {
    calls_->fetch_add(1);
    return inner_->Delete(key);
  }
  Status DeleteIf(std::string_view key, std::string_view expected) override {
    calls_->fetch_add(1);
    return inner_->DeleteIf(key, expected);
  }
  Result<std::vector<KeyValue>> List(std::string_view prefix) override {
    calls_->fetch_add(1);
    return inner_->List(prefix);
  }
  Watcher* watcher() override { return inner_->watcher(); }
  bool TakenOver(std::string_view key) const override { return inner_->TakenOver(key); }
  void Abandon() override { inner_->Abandon(); }

 private:
  std::unique_ptr<MetadataStore> inner_;
  std::atomic<uint64_t>* const calls_;
};

// ---- state shared by every process (mapped before the fork) ----------------------------------

struct SharedTable {
  std::atomic<uint64_t> live;       // the live incarnation; 0 while stopped
  std::atomic<uint64_t> old_inc;    // the incarnation before the storm
  std::atomic<uint64_t> new_inc;    // the incarnation after the storm; 0 if it did not restart
  std::atomic<int64_t> publish_ns;  // when the new incarnation began publishing
};

std::string EngineName(int i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "sim-%05d", i);
  return buf;
}

uint64_t NewIncarnation() {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(NowNs()) ^
                                          getpid());
  uint64_t v = 0;
  while (v == 0) v = rng();
  return v;
}

SegmentDesc MakeDesc(const std::string& name, uint64_t incarnation, int buffers, int keys) {
  SegmentDesc desc;
  desc.name = name;
  desc.incarnation = incarnation;
  desc.rpc = {"127.0.0.1", 4000};
  desc.host.hostname = "sim-host";
  desc.transports["tcp"] = "";
  for (int i = 0; i < buffers; ++i) {
    BufferDesc b;
    b.addr = 0x100000 + static_cast<uint64_t>(i) * 0x10000;
    b.length = 0x8000;
    b.location = Location::CpuNuma(0);
    b.generation = static_cast<uint64_t>(i) + 1;
    b.remote_accessible = true;
    static const char* const kTransports[] = {"tcp", "rdma", "shm", "cxl", "file", "cuda_ipc"};
    for (int k = 0; k < keys && k < 6; ++k) {
      b.keys[kTransports[k]] = "0123456789abcdef0123456789abcdef";
    }
    desc.buffers.push_back(b);
  }
  return desc;
}

// The target-side incarnation check, as TransferEngine::Impl's CheckRemoteIncarnation makes it
// for every remote access: planned against the live incarnation, or refused as Stale.
bool TargetAccepts(uint64_t planned_incarnation, uint64_t live_incarnation) {
  return planned_incarnation == live_incarnation;
}

// ---- worker ----------------------------------------------------------------------------------

class Worker {
 public:
  Worker(const Flags& flags, int index, SharedTable* table)
      : flags_(flags), index_(index), table_(table) {}

  // Serves commands on `fd` until "quit" or EOF.
  void Serve(int fd);

 private:
  struct Engine {
    int index = 0;
    std::string name;
    SegmentDesc desc;
    std::unique_ptr<MetadataStore> store;   // share=engine
    std::unique_ptr<SegmentDirectory> dir;  // share=engine
    MetadataStore* store_ptr = nullptr;
    SegmentDirectory* dir_ptr = nullptr;
    std::unique_ptr<SegmentPublisher> publisher;
    std::vector<std::string> peers;
    std::vector<SegmentId> peer_ids;
    uint64_t next_generation = 0;
  };

  Status StartEngine(Engine& e);
  void StopEngine(Engine& e);
  Status OpenPeers(Engine& e, Histogram* cold, uint64_t* errors);
  // Runs fn(i) for i in [0, n) on flags_.threads threads.
  template <typename Fn>
  void Parallel(size_t n, Fn fn);

  std::string Setup();
  std::string Cold();
  std::string Warm();
  std::string Steady(double seconds);
  std::string Churn(double seconds);
  std::string Storm(const std::vector<int>& restarting);
  std::string Teardown();

  const Flags& flags_;
  const int index_;
  SharedTable* const table_;
  StoreOptions store_options_;
  std::atomic<uint64_t> calls_{0};
  std::unique_ptr<MetadataStore> shared_store_;
  std::unique_ptr<SegmentDirectory> shared_dir_;
  std::vector<std::unique_ptr<Engine>> engines_;  // this worker's, in index order
  std::mutex error_mu_;
  std::string first_error_;
  void NoteError(const Status& s) {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (first_error_.empty()) first_error_ = s.ToString();
  }
};

template <typename Fn>
void Worker::Parallel(size_t n, Fn fn) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> threads;
  const int t = std::max(1, std::min<int>(flags_.threads, static_cast<int>(n)));
  for (int k = 0; k < t; ++k) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < n; i = next++) fn(i);
    });
  }
  for (auto& th : threads) th.join();
}

Status Worker::StartEngine(Engine& e) {
  if (flags_.share == "process") {
    e.store_ptr = shared_store_.get();
    e.dir_ptr = shared_dir_.get();
  } else {
    ASSIGN_OR_RETURN(std::unique_ptr<MetadataStore> inner,
                     CreateMetadataStore(flags_.store, store_options_));
    e.store = std::make_unique<CountingStore>(std::move(inner), &calls_);
    DirectoryOptions dopts;
    dopts.prefix = flags_.prefix;
    dopts.cache_ttl = milliseconds(flags_.cache_ttl_ms);
    ASSIGN_OR_RETURN(e.dir, SegmentDirectory::Create(e.store.get(), std::move(dopts)));
    e.store_ptr = e.store.get();
    e.dir_ptr = e.dir.get();
  }
  e.publisher = std::make_unique<SegmentPublisher>(e.store_ptr, flags_.prefix);
  table_[e.index].live.store(e.desc.incarnation);
  std::string encoded;
  RETURN_IF_ERROR(e.publisher->Publish(e.desc, &encoded).WithContext("publishing " + e.name));
  if (e.desc.buffers.size() >= 1000) {
    std::cerr << e.name << ": published " << e.desc.buffers.size() << " buffers in "
              << encoded.size() << " bytes of descriptor JSON\n";
  }
  return Status::Ok();
}

void Worker::StopEngine(Engine& e) {
  table_[e.index].live.store(0);
  if (e.publisher != nullptr) {
    Status s = e.publisher->Remove();
    if (!s.ok()) NoteError(s.WithContext("removing " + e.name));
  }
  e.publisher.reset();
  e.dir.reset();
  e.store.reset();
  e.store_ptr = nullptr;
  e.dir_ptr = nullptr;
  e.peer_ids.clear();
}

Status Worker::OpenPeers(Engine& e, Histogram* cold, uint64_t* errors) {
  e.peer_ids.clear();
  Status first;
  for (const std::string& peer : e.peers) {
    const int64_t t0 = NowNs();
    Result<SegmentHandle> h = e.dir_ptr->Open(peer);
    const int64_t t1 = NowNs();
    if (!h.ok()) {
      ++*errors;
      if (first.ok()) first = h.status();
      e.peer_ids.push_back(0);
      continue;
    }
    if (cold != nullptr) cold->Add(t1 - t0);
    e.peer_ids.push_back(h->id);
  }
  return first;
}

std::string Worker::Setup() {
  store_options_.request_timeout = milliseconds(flags_.request_timeout_ms);
  store_options_.lease_ttl = milliseconds(flags_.lease_ttl_ms);
  if (flags_.share == "process") {
    Result<std::unique_ptr<MetadataStore>> inner =
        CreateMetadataStore(flags_.store, store_options_);
    if (!inner.ok()) return "error " + inner.status().ToString();
    shared_store_ = std::make_unique<CountingStore>(std::move(inner).value(), &calls_);
    DirectoryOptions dopts;
    dopts.prefix = flags_.prefix;
    dopts.cache_ttl = milliseconds(flags_.cache_ttl_ms);
    Result<std::unique_ptr<SegmentDirectory>> dir =
        SegmentDirectory::Create(shared_store_.get(), std::move(dopts));
    if (!dir.ok()) return "error " + dir.status().ToString();
    shared_dir_ = std::move(dir).value();
  }
  for (int i = index_; i < flags_.engines; i += flags_.procs) {
    auto e = std::make_unique<Engine>();
    e->index = i;
    e->name = EngineName(i);
    const int b = (i == 0 && flags_.big_buffers > 0) ? flags_.big_buffers : flags_.buffers;
    e->desc = MakeDesc(e->name, NewIncarnation(), b, flags_.keys);
    e->next_generation = static_cast<uint64_t>(b) + 1;
    // Peers spread over the other workers: i+1, i+2, ... (mod N), never itself.
    for (int k = 1; k <= std::min(flags_.fanout, flags_.engines - 1); ++k) {
      e->peers.push_back(EngineName((i + k) % flags_.engines));
    }
    table_[i].old_inc.store(e->desc.incarnation);
    engines_.push_back(std::move(e));
  }
  Histogram publish;
  std::mutex mu;
  uint64_t errors = 0;
  Parallel(engines_.size(), [&](size_t k) {
    const int64_t t0 = NowNs();
    Status s = StartEngine(*engines_[k]);
    const int64_t t1 = NowNs();
    std::lock_guard<std::mutex> lock(mu);
    if (!s.ok()) {
      ++errors;
      NoteError(s);
    } else {
      publish.Add(t1 - t0);
    }
  });
  return "ok " + std::to_string(errors) + " " + publish.Serialize();
}

std::string Worker::Cold() {
  Histogram cold;
  uint64_t errors = 0;
  std::mutex mu;
  Parallel(engines_.size(), [&](size_t k) {
    Histogram h;
    uint64_t err = 0;
    Status s = OpenPeers(*engines_[k], &h, &err);
    if (!s.ok()) NoteError(s.WithContext(engines_[k]->name + " opening its peers"));
    std::lock_guard<std::mutex> lock(mu);
    cold.Merge(h);
    errors += err;
  });
  return "ok " + std::to_string(errors) + " " + cold.Serialize();
}

std::string Worker::Warm() {
  Histogram warm;
  constexpr int kRounds = 20;
  for (auto& e : engines_) {
    for (const std::string& peer : e->peers) {
      for (int r = 0; r < kRounds; ++r) {
        const int64_t t0 = NowNs();
        Result<SegmentHandle> h = e->dir_ptr->Open(peer);
        const int64_t t1 = NowNs();
        if (h.ok()) warm.Add(t1 - t0);
      }
    }
  }
  return "ok 0 " + warm.Serialize();
}

std::string Worker::Steady(double seconds) {
  const uint64_t calls0 = calls_.load();
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  uint64_t errors = 0;
  while (Clock::now() < end) {
    for (auto& e : engines_) {
      for (SegmentId id : e->peer_ids) {
        if (id != 0 && !e->dir_ptr->Get(id).ok()) ++errors;
      }
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  return "ok " + std::to_string(errors) + " " + std::to_string(calls_.load() - calls0);
}

std::string Worker::Churn(double seconds) {
  // Each engine republishes at churn_rate per second: register a buffer (a new one past the
  // last) or unregister its newest, alternately; the descriptor's other buffers stay.
  Histogram publish;
  uint64_t errors = 0;
  const uint64_t calls0 = calls_.load();
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  const double period_s = 1.0 / std::max(flags_.churn_rate, 1e-3);
  const size_t n = engines_.size();
  size_t step = 0;
  while (Clock::now() < end) {
    // Engine k's j-th change is due at (k/n + j) * period.
    Engine& e = *engines_[step % n];
    const double due_s =
        (static_cast<double>(step % n) / n + static_cast<double>(step / n)) * period_s;
    const auto due =
        start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(due_s));
    if (due >= end) break;
    std::this_thread::sleep_until(due);
    if ((step / n) % 2 == 0) {
      BufferDesc b = e.desc.buffers.back();
      b.addr += 0x10000;
      b.generation = e.next_generation++;
      e.desc.buffers.push_back(b);
    } else {
      e.desc.buffers.pop_back();
    }
    const int64_t t0 = NowNs();
    Status s = e.publisher->Publish(e.desc);
    const int64_t t1 = NowNs();
    if (s.ok()) {
      publish.Add(t1 - t0);
    } else {
      ++errors;
      NoteError(s);
    }
    ++step;
  }
  return "ok " + std::to_string(errors) + " " + std::to_string(calls_.load() - calls0) + " " +
         publish.Serialize();
}

std::string Worker::Storm(const std::vector<int>& restarting) {
  // Observers: (engine, peer slot) pairs whose peer restarts and whose engine does not.
  std::vector<bool> restarts(static_cast<size_t>(flags_.engines), false);
  for (int i : restarting) restarts[static_cast<size_t>(i)] = true;
  struct Pair {
    Engine* e;
    size_t slot;
    int peer;
    bool seen = false;
  };
  std::vector<Pair> pairs;
  for (auto& e : engines_) {
    if (restarts[static_cast<size_t>(e->index)]) continue;
    for (size_t s = 0; s < e->peers.size(); ++s) {
      const int peer = std::stoi(e->peers[s].substr(4));
      if (restarts[static_cast<size_t>(peer)] && e->peer_ids[s] != 0) {
        pairs.push_back({e.get(), s, peer});
      }
    }
  }
  // The restarts of this worker's engines, on their own threads ("at once").
  std::vector<std::thread> restarters;
  std::atomic<uint64_t> restart_errors{0};
  for (auto& e : engines_) {
    if (!restarts[static_cast<size_t>(e->index)]) continue;
    Engine* ep = e.get();
    restarters.emplace_back([this, ep, &restart_errors] {
      StopEngine(*ep);
      ep->desc.incarnation = NewIncarnation();
      table_[ep->index].new_inc.store(ep->desc.incarnation);
      table_[ep->index].publish_ns.store(NowNs());
      Status s = StartEngine(*ep);
      if (!s.ok()) {
        ++restart_errors;
        NoteError(s);
        return;
      }
      uint64_t err = 0;
      OpenPeers(*ep, nullptr, &err).IgnoreError();
    });
  }
  Histogram lag;
  uint64_t planned = 0, planned_old = 0, refused_old = 0, applied_old = 0, unresolved = 0;
  size_t left = pairs.size();
  const auto deadline = Clock::now() + std::chrono::duration<double>(flags_.storm_timeout_s);
  while (left > 0 && Clock::now() < deadline) {
    for (Pair& p : pairs) {
      if (p.seen) continue;
      SharedTable& t = table_[p.peer];
      // What the data path does for each request: resolve the target (Get: cached when fresh,
      // else fetched), plan against that descriptor, and the target checks the incarnation.
      Result<SegmentHandle> h = p.e->dir_ptr->Get(p.e->peer_ids[p.slot]);
      if (!h.ok()) {
        ++unresolved;  // gone from the store for now: nothing planned
        continue;
      }
      const uint64_t inc = h->desc->incarnation;
      ++planned;
      // The target's state when the request reaches it: before the old engine stopped, a request
      // planned against it is current (and applies to it); after, it is planned against an old
      // incarnation and must be refused.
      const uint64_t live = t.live.load();
      const bool accepted = TargetAccepts(inc, live);
      if (inc == t.old_inc.load() && live != inc) {
        ++planned_old;
        if (accepted) {
          ++applied_old;
        } else {
          ++refused_old;
        }
      }
      const uint64_t fresh = t.new_inc.load();
      if (fresh != 0 && inc == fresh) {
        p.seen = true;
        --left;
        lag.Add(NowNs() - t.publish_ns.load());
      }
    }
    if (left > 0) std::this_thread::sleep_for(milliseconds(1));
  }
  for (auto& th : restarters) th.join();
  std::ostringstream out;
  out << "ok " << restart_errors.load() << " " << restarters.size() << " " << pairs.size() << " "
      << (pairs.size() - left) << " " << planned << " " << planned_old << " " << refused_old << " "
      << applied_old << " " << unresolved << " " << lag.Serialize();
  return out.str();
}

std::string Worker::Teardown() {
  Parallel(engines_.size(), [&](size_t k) { StopEngine(*engines_[k]); });
  shared_dir_.reset();
  shared_store_.reset();
  return "ok";
}

bool ReadLine(int fd, std::string* buffered, std::string* line, int timeout_ms) {
  const auto deadline = Clock::now() + milliseconds(timeout_ms);
  for (;;) {
    const size_t nl = buffered->find('\n');
    if (nl != std::string::npos) {
      *line = buffered->substr(0, nl);
      buffered->erase(0, nl + 1);
      return true;
    }
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000))) < 0 && errno != EINTR) {
      return false;
    }
    if (p.revents == 0) continue;
    char buf[65536];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    buffered->append(buf, static_cast<size_t>(n));
  }
}

bool WriteLine(int fd, const std::string& line) {
  const std::string s = line + "\n";
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

void Worker::Serve(int fd) {
  std::string buffered, line;
  while (ReadLine(fd, &buffered, &line, 3600 * 1000)) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    std::string reply;
    if (cmd == "setup") {
      reply = Setup();
    } else if (cmd == "cold") {
      reply = Cold();
    } else if (cmd == "warm") {
      reply = Warm();
    } else if (cmd == "steady") {
      double s = 0;
      in >> s;
      reply = Steady(s);
    } else if (cmd == "churn") {
      double s = 0;
      in >> s;
      reply = Churn(s);
    } else if (cmd == "storm") {
      std::vector<int> restarting;
      int i = 0;
      while (in >> i) restarting.push_back(i);
      reply = Storm(restarting);
    } else if (cmd == "teardown") {
      reply = Teardown();
    } else if (cmd == "error") {
      std::lock_guard<std::mutex> lock(error_mu_);
      reply = first_error_;
    } else {
      break;  // quit
    }
    if (!WriteLine(fd, reply)) break;
  }
}

// ---- coordinator -----------------------------------------------------------------------------

struct ProcSample {
  double cpu_s = 0;  // utime + stime
  double rss_mb = 0;
  double hwm_mb = 0;
};

ProcSample SampleProc(int pid) {
  ProcSample s;
  if (pid <= 0) return s;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close != std::string::npos) {
    std::istringstream in(text.substr(close + 2));
    std::string field;
    uint64_t utime = 0, stime = 0;
    for (int i = 3; i <= 15 && in >> field; ++i) {
      if (i == 14) utime = std::stoull(field);
      if (i == 15) stime = std::stoull(field);
    }
    s.cpu_s = static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (status >> key) {
    double kb = 0;
    if (key == "VmRSS:" && status >> kb) s.rss_mb = kb / 1024;
    if (key == "VmHWM:" && status >> kb) s.hwm_mb = kb / 1024;
  }
  return s;
}

// The store's own request counter: the first number `cmd` prints; -1 without one.
double StoreRequests(const std::string& cmd) {
  if (cmd.empty()) return -1;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  double v = -1;
  if (std::fscanf(p, "%lf", &v) != 1) v = -1;
  pclose(p);
  return v;
}

class Coordinator {
 public:
  explicit Coordinator(const Flags& flags) : flags_(flags) {}
  int Run();

 private:
  // Sends `cmd` to every worker (or `per_worker[i]`) and returns the replies; exits on error.
  std::vector<std::string> All(const std::string& cmd, int timeout_ms);
  struct WorkerConn {
    pid_t pid = 0;
    int fd = -1;
    std::string buffered;
  };
  const Flags& flags_;
  std::vector<WorkerConn> workers_;
};

std::vector<std::string> Coordinator::All(const std::string& cmd, int timeout_ms) {
  for (WorkerConn& w : workers_) {
    if (!WriteLine(w.fd, cmd)) {
      std::cerr << "ferry-scale-sim: worker " << w.pid << " is gone (sending " << cmd << ")\n";
      std::exit(1);
    }
  }
  std::vector<std::string> replies;
  for (WorkerConn& w : workers_) {
    std::string line;
    if (!ReadLine(w.fd, &w.buffered, &line, timeout_ms)) {
      std::cerr << "ferry-scale-sim: worker " << w.pid << " did not answer '" << cmd.substr(0, 20)
                << "' within " << timeout_ms << " ms\n";
      for (WorkerConn& k : workers_) kill(k.pid, SIGKILL);
      std::exit(1);
    }
    replies.push_back(line);
  }
  return replies;
}

int Coordinator::Run() {
  const size_t n = static_cast<size_t>(flags_.engines);
  void* mem = mmap(nullptr, sizeof(SharedTable) * n, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto* table = new (mem) SharedTable[n];
  for (int w = 0; w < flags_.procs; ++w) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      std::perror("socketpair");
      return 1;
    }
    const pid_t pid = fork();
    if (pid == 0) {
      for (WorkerConn& c : workers_) close(c.fd);
      close(sv[0]);
      Worker(flags_, w, table).Serve(sv[1]);
      std::fflush(nullptr);
      _exit(0);
    }
    close(sv[1]);
    workers_.push_back({pid, sv[0], {}});
  }
  auto log = [&](const std::string& what) {
    std::cerr << "[" << flags_.label << " " << flags_.store.substr(0, flags_.store.find(':'))
              << " N=" << flags_.engines << "] " << what << std::endl;
  };
  auto parse = [](const std::string& reply, uint64_t* errors) {
    std::istringstream in(reply);
    std::string ok;
    in >> ok >> *errors;
    return in.str().substr(static_cast<size_t>(std::max<std::streamoff>(in.tellg(), 0)));
  };
  auto first_error = [&]() {
    for (const std::string& e : All("error", 10000)) {
      if (!e.empty()) return e;
    }
    return std::string();
  };
  constexpr int kLong = 600 * 1000;
  std::map<std::string, double> row;
  uint64_t errors_total = 0;

  log("setup: creating and publishing");
  Histogram publish;
  const auto setup0 = Clock::now();
  for (const std::string& r : All("setup", kLong)) {
    uint64_t e = 0;
    std::istringstream rest(parse(r, &e));
    if (r.rfind("ok", 0) != 0) {
      std::cerr << "ferry-scale-sim: setup failed: " << r << "\n";
      return 1;
    }
    errors_total += e;
    publish.Merge(Histogram::Parse(rest));
  }
  row["setup_s"] = std::chrono::duration<double>(Clock::now() - setup0).count();
  row["publish_p50_ms"] = publish.Quantile(0.5) / 1e6;
  row["publish_p99_ms"] = publish.Quantile(0.99) / 1e6;

  log("cold opens");
  Histogram cold;
  for (const std::string& r : All("cold", kLong)) {
    uint64_t e = 0;
    std::istringstream rest(parse(r, &e));
    errors_total += e;
    cold.Merge(Histogram::Parse(rest));
  }
  row["cold_p50_ms"] = cold.Quantile(0.5) / 1e6;
  row["cold_p99_ms"] = cold.Quantile(0.99) / 1e6;
  row["cold_max_ms"] = cold.Quantile(1.0) / 1e6;

  log("warm opens");
  Histogram warm;
  for (const std::string& r : All("warm", kLong)) {
    uint64_t e = 0;
    std::istringstream rest(parse(r, &e));
    warm.Merge(Histogram::Parse(rest));
  }
  row["warm_p50_us"] = warm.Quantile(0.5) / 1e3;
  row["warm_p99_us"] = warm.Quantile(0.99) / 1e3;

  if (flags_.steady_s > 0) {
    log("steady " + std::to_string(flags_.steady_s) + " s");
    const double req0 = StoreRequests(flags_.store_stats_cmd);
    const ProcSample p0 = SampleProc(flags_.store_pid);
    const auto t0 = Clock::now();
    uint64_t client_calls = 0;
    for (const std::string& r : All("steady " + std::to_string(flags_.steady_s), kLong)) {
      uint64_t e = 0;
      std::istringstream rest(parse(r, &e));
      errors_total += e;
      uint64_t c = 0;
      rest >> c;
      client_calls += c;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double req1 = StoreRequests(flags_.store_stats_cmd);
    const ProcSample p1 = SampleProc(flags_.store_pid);
    row["steady_store_rps_per_engine"] =
        req0 >= 0 && req1 >= 0 ? (req1 - req0) / secs / static_cast<double>(n) : -1;
    row["steady_client_rps_per_engine"] =
        static_cast<double>(client_calls) / secs / static_cast<double>(n);
    row["steady_store_cpu_pct"] = flags_.store_pid > 0 ? 100 * (p1.cpu_s - p0.cpu_s) / secs : -1;
    row["steady_store_rss_mb"] = p1.rss_mb;
  }

  if (flags_.churn_s > 0) {
    log("churn " + std::to_string(flags_.churn_s) + " s");
    const double req0 = StoreRequests(flags_.store_stats_cmd);
    const auto t0 = Clock::now();
    Histogram churn;
    for (const std::string& r : All("churn " + std::to_string(flags_.churn_s), kLong)) {
      uint64_t e = 0;
      std::istringstream rest(parse(r, &e));
      errors_total += e;
      uint64_t c = 0;
      rest >> c;
      churn.Merge(Histogram::Parse(rest));
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double req1 = StoreRequests(flags_.store_stats_cmd);
    row["churn_publish_p50_ms"] = churn.Quantile(0.5) / 1e6;
    row["churn_publish_p99_ms"] = churn.Quantile(0.99) / 1e6;
    row["churn_store_rps_per_engine"] =
        req0 >= 0 && req1 >= 0 ? (req1 - req0) / secs / static_cast<double>(n) : -1;
  }

  if (flags_.storm_fraction > 0 && flags_.engines > 1) {
    std::string cmd = "storm";
    const int every = std::max(1, static_cast<int>(std::lround(1.0 / flags_.storm_fraction)));
    int restarted = 0;
    for (int i = 0; i < flags_.engines; i += every, ++restarted) cmd += " " + std::to_string(i);
    log("storm: " + std::to_string(restarted) + " engines restart at once");
    const ProcSample p0 = SampleProc(flags_.store_pid);
    const auto t0 = Clock::now();
    Histogram lag;
    uint64_t pairs = 0, seen = 0, planned = 0, planned_old = 0, refused_old = 0, applied_old = 0;
    for (const std::string& r :
         All(cmd, static_cast<int>(flags_.storm_timeout_s * 1000) + 120 * 1000)) {
      uint64_t e = 0;
      std::istringstream rest(parse(r, &e));
      errors_total += e;
      uint64_t restarts = 0, p = 0, s = 0, pl = 0, po = 0, ro = 0, ao = 0, un = 0;
      rest >> restarts >> p >> s >> pl >> po >> ro >> ao >> un;
      pairs += p;
      seen += s;
      planned += pl;
      planned_old += po;
      refused_old += ro;
      applied_old += ao;
      lag.Merge(Histogram::Parse(rest));
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const ProcSample p1 = SampleProc(flags_.store_pid);
    row["storm_restarted"] = restarted;
    row["storm_pairs"] = static_cast<double>(pairs);
    row["storm_pairs_seen"] = static_cast<double>(seen);
    row["storm_lag_p50_ms"] = lag.Quantile(0.5) / 1e6;
    row["storm_lag_max_ms"] = lag.Quantile(1.0) / 1e6;
    row["storm_planned"] = static_cast<double>(planned);
    row["storm_planned_old"] = static_cast<double>(planned_old);
    row["storm_refused_old"] = static_cast<double>(refused_old);
    row["storm_applied_old"] = static_cast<double>(applied_old);
    row["storm_store_cpu_pct"] = flags_.store_pid > 0 ? 100 * (p1.cpu_s - p0.cpu_s) / secs : -1;
    row["storm_store_rss_mb"] = p1.rss_mb;
    row["store_rss_peak_mb"] = p1.hwm_mb;
  }
  const std::string err = errors_total > 0 ? first_error() : "";
  log("teardown");
  All("teardown", kLong);
  for (WorkerConn& w : workers_) {
    WriteLine(w.fd, "quit");
    close(w.fd);
    int status = 0;
    waitpid(w.pid, &status, 0);
  }
  row["errors"] = static_cast<double>(errors_total);

  const std::vector<std::string> columns = {"setup_s",
                                            "publish_p50_ms",
                                            "publish_p99_ms",
                                            "cold_p50_ms",
                                            "cold_p99_ms",
                                            "cold_max_ms",
                                            "warm_p50_us",
                                            "warm_p99_us",
                                            "steady_store_rps_per_engine",
                                            "steady_client_rps_per_engine",
                                            "steady_store_cpu_pct",
                                            "steady_store_rss_mb",
                                            "churn_publish_p50_ms",
                                            "churn_publish_p99_ms",
                                            "churn_store_rps_per_engine",
                                            "storm_restarted",
                                            "storm_pairs",
                                            "storm_pairs_seen",
                                            "storm_lag_p50_ms",
                                            "storm_lag_max_ms",
                                            "storm_planned",
                                            "storm_planned_old",
                                            "storm_refused_old",
                                            "storm_applied_old",
                                            "storm_store_cpu_pct",
                                            "storm_store_rss_mb",
                                            "store_rss_peak_mb",
                                            "errors"};
  if (flags_.csv_header) {
    std::cout << "label,store,engines,procs,buffers,big_buffers,fanout,share";
    for (const auto& c : columns) std::cout << "," << c;
    std::cout << ",first_error\n";
  }
  std::string first = err;
  std::replace(first.begin(), first.end(), ',', ';');
  std::replace(first.begin(), first.end(), '\n', ' ');
  std::cout << flags_.label << "," << flags_.store.substr(0, flags_.store.find(':')) << ","
            << flags_.engines << "," << flags_.procs << "," << flags_.buffers << ","
            << flags_.big_buffers << "," << flags_.fanout << "," << flags_.share;
  for (const auto& c : columns) {
    auto it = row.find(c);
    char buf[64];
    if (it == row.end()) {
      std::snprintf(buf, sizeof buf, ",");
    } else {
      std::snprintf(buf, sizeof buf, ",%.4g", it->second);
    }
    std::cout << buf;
  }
  std::cout << "," << first << std::endl;
  return 0;
}

}  // namespace
}  // namespace ferry

int main(int argc, char** argv) {
  ferry::Flags f;
  CLI::App app{"ferry-scale-sim: N simulated engines' metadata plane against one real store"};
  app.add_option("--store", f.store, "connection string (etcd://h:p, redis://h:p, http://h:p/m)")
      ->required();
  app.add_option("--engines", f.engines, "simulated engines (N)")->check(CLI::Range(1, 100000));
  app.add_option("--procs", f.procs, "worker processes")->check(CLI::Range(1, 256));
  app.add_option("--buffers", f.buffers, "buffers per descriptor (B)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--big-buffers", f.big_buffers, "engine 0's buffers, when > 0")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--fanout", f.fanout, "peers each engine opens (F)")->check(CLI::Range(0, 100000));
  app.add_option("--keys", f.keys, "transport keys per buffer (1..6)")->check(CLI::Range(1, 6));
  app.add_option("--threads", f.threads, "threads per worker for setup and cold opens")
      ->check(CLI::Range(1, 256));
  app.add_option("--share", f.share,
                 "engine: a store client and directory per engine (as TransferEngine); process: "
                 "one per worker process, shared by its engines")
      ->check(CLI::IsMember({"engine", "process"}));
  app.add_option("--steady-s", f.steady_s, "steady-state window (s)");
  app.add_option("--churn-s", f.churn_s, "register/unregister window (s); 0 skips it");
  app.add_option("--churn-rate", f.churn_rate, "republishes per engine per second in churn");
  app.add_option("--storm-fraction", f.storm_fraction, "engines that restart at once; 0 skips");
  app.add_option("--storm-timeout-s", f.storm_timeout_s, "bound on seeing every new incarnation");
  app.add_option("--lease-ttl-ms", f.lease_ttl_ms, "StoreOptions::lease_ttl");
  app.add_option("--cache-ttl-ms", f.cache_ttl_ms, "DirectoryOptions::cache_ttl");
  app.add_option("--request-timeout-ms", f.request_timeout_ms, "StoreOptions::request_timeout");
  app.add_option("--store-pid", f.store_pid, "the store's pid, for CPU and RSS from /proc");
  app.add_option("--store-stats-cmd", f.store_stats_cmd,
                 "shell command printing the store's total request count");
  app.add_option("--label", f.label, "first CSV column");
  app.add_option("--prefix", f.prefix, "metadata key prefix");
  app.add_flag("--csv-header", f.csv_header, "print the CSV header line first");
  CLI11_PARSE(app, argc, argv);
  if (f.procs > f.engines) f.procs = f.engines;
  signal(SIGPIPE, SIG_IGN);
  return ferry::Coordinator(f).Run();
}
