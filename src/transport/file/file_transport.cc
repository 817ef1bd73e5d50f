#include "transport/file/file_transport.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "transport/file/file_handle.h"
#include "transport/file/uring_queue.h"

namespace ferry {
namespace {

using file::FileHandle;
using file::FileOp;
using file::SyncGroup;
using file::UringQueue;

constexpr std::string_view kName = "file";

std::string Hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// A file window as a link knows it: where its bytes are and the handle that reaches them.
struct Window {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t generation = 0;
  FileWindow file;
  std::shared_ptr<FileHandle> handle;  // opened by the first slice (remote links)
  Status open_error;                   // why it could not be opened (remote links)
};

// Per-peer state: for this engine's own segment nothing (own buffers are looked up in the
// transport at every slice, under a pin); for another engine, its file windows.
class FileLink final : public PeerLink {
 public:
  bool local = false;
  std::string peer;
  bool same_host = false;
  Mutex mu;
  std::map<uint64_t, Window> windows GUARDED_BY(mu);  // by addr
};

// This engine's own file buffers.
struct LocalFile {
  uint64_t length = 0;
  uint64_t offset = 0;
  std::shared_ptr<FileHandle> handle;
};

class FileTransport final : public Transport {
 public:
  explicit FileTransport(const FileTransportOptions& options) : options_(options) {}
  ~FileTransport() override { Stop(); }

  std::string_view name() const override { return kName; }
  TransportCapabilities capabilities() const override {
    TransportCapabilities caps;
    caps.reaches_other_hosts = true;  // through the path map of a shared volume
    caps.file_buffers = true;
    caps.preferred_slice_size = options_.preferred_slice_size;
    return caps;
  }

  Result<std::string> Start(TransportContext* ctx, const TransportStartInfo& /*info*/) override {
    // The ring and its thread wait for the first file (Queue()); only whether they can exist is
    // checked here.
    RETURN_IF_ERROR(FileTransportAvailable());
    ctx_ = ctx;
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) hostname_ = host;
    std::ifstream boot("/proc/sys/kernel/random/boot_id");
    std::getline(boot, boot_id_);
    return std::string();
  }

  void Stop() override {
    UringQueue* queue = nullptr;
    {
      MutexLock lock(queue_mu_);
      stopped_ = true;
      queue = queue_owner_.get();  // never reset before the destructor
    }
    if (queue != nullptr) queue->Stop();
  }

  Result<std::string> RegisterMemory(uint64_t, uint64_t, const Location&, MemoryAccess) override {
    // Memory is reached through the engine's pin on the request's local side.
    return NotFoundError("the file transport registers files, not memory");
  }
  Status UnregisterMemory(uint64_t, uint64_t) override { return Status::Ok(); }

  Result<FileWindow> RegisterFile(uint64_t addr, uint64_t length, const std::string& path,
                                  uint64_t offset) override {
    if (length == 0) return InvalidArgumentError("a file buffer needs length > 0");
    ASSIGN_OR_RETURN(std::unique_ptr<FileHandle> opened, FileHandle::Open(path));
    if (offset > opened->size() || length > opened->size() - offset) {
      return InvalidArgumentError("window [" + std::to_string(offset) + ", +" +
                                  std::to_string(length) + ") of file '" + path +
                                  "' reaches past its end (" + std::to_string(opened->size()) +
                                  " bytes): extend the file first (ftruncate or fallocate)");
    }
    ASSIGN_OR_RETURN(UringQueue * queue, Queue());
    std::shared_ptr<FileHandle> handle(std::move(opened));
    queue->RegisterFile(handle.get());
    FileWindow window{.device = handle->device(),
                      .inode = handle->inode(),
                      .size = handle->size(),
                      .offset = offset,
                      .paths = {}};
    LockGuard lock(local_mu_);
    local_[addr] = LocalFile{length, offset, std::move(handle)};
    return window;
  }

  Status UnregisterFile(uint64_t addr) override {
    LockGuard lock(local_mu_);
    if (local_.erase(addr) == 0) return NotFoundError("no file buffer at " + Hex(addr));
    return Status::Ok();
  }

  Result<std::shared_ptr<PeerLink>> Connect(const SegmentDesc& peer) override {
    auto link = std::make_shared<FileLink>();
    link->peer = peer.name;
    link->local = peer.incarnation == ctx_->incarnation();
    link->same_host = !boot_id_.empty() && peer.host.boot_id == boot_id_;
    if (!link->local) {
      MutexLock lock(link->mu);
      for (const BufferDesc& b : peer.buffers) {
        if (!b.file.has_value() || b.keys.count(std::string(kName)) == 0) continue;
        link->windows[b.addr] = Window{b.addr, b.length, b.generation, *b.file, nullptr, {}};
      }
    }
    return std::shared_ptr<PeerLink>(std::move(link));
  }

  Status Submit(PeerLink& peer_link, std::span<Slice* const> slices) override;

  bool Reaches(const SegmentDesc& peer, const BufferDesc& buffer) override {
    if (!buffer.file.has_value()) return false;
    if (peer.incarnation == ctx_->incarnation()) return true;  // this engine's own file
    const std::tuple<uint64_t, uint64_t, uint64_t> key{peer.incarnation, buffer.addr,
                                                       buffer.generation};
    {
      LockGuard lock(visible_mu_);
      if (auto it = visible_.find(key); it != visible_.end()) return it->second;
    }
    const bool same_host = !boot_id_.empty() && peer.host.boot_id == boot_id_;
    const bool visible = Visible(*buffer.file, buffer.length, same_host).ok();
    LockGuard lock(visible_mu_);
    if (visible_.size() >= kMaxVisibleEntries) visible_.clear();  // bounded; recomputed on use
    visible_[key] = visible;
    return visible;
  }

  Result<std::string> OnExchange(std::string_view) override {
    return InvalidArgumentError("the file transport exchanges nothing");
  }

 private:
  // The op for `slice`, or the reason it cannot run.
  Result<FileOp*> Resolve(FileLink& link, Slice* slice);
  Result<std::shared_ptr<FileHandle>> OpenRemote(const FileLink& link, const Window& w);
  // Whether `file` (a window of `length` bytes) is visible here: the path its map names for this
  // host holds the published file (stat, nothing opened). NotFound naming why not.
  Status Visible(const FileWindow& file, uint64_t length, bool same_host) const;
  static constexpr size_t kMaxVisibleEntries = 4096;
  // The ring, made on first use: an engine that never touches a file pays for no ring and no
  // thread. Canceled after Stop; Unavailable when io_uring cannot be set up.
  Result<UringQueue*> Queue() EXCLUDES(queue_mu_) {
    if (UringQueue* queue = queue_.load(std::memory_order_acquire)) return queue;
    MutexLock lock(queue_mu_);
    if (stopped_) return CanceledError("the file transport is stopping");
    if (queue_owner_ == nullptr) {
      ASSIGN_OR_RETURN(queue_owner_, UringQueue::Create(
                                         options_.queue_depth, options_.max_queued,
                                         [this](FileOp* op, const Status& s) { Complete(op, s); }));
      queue_.store(queue_owner_.get(), std::memory_order_release);
    }
    return queue_owner_.get();
  }
  void Complete(FileOp* op, const Status& status) {
    Slice* slice = op->slice;
    slice->io_path = op->io_path;
    slice->answered = !status.ok() && op->answered;  // the device's verdict, not a broken link
    op->pin.Release();
    delete op;
    ctx_->CompleteSlice(slice, status);
  }

  const FileTransportOptions options_;
  TransportContext* ctx_ = nullptr;
  std::string hostname_;
  std::string boot_id_;
  Mutex queue_mu_;
  bool stopped_ GUARDED_BY(queue_mu_) = false;
  std::unique_ptr<UringQueue> queue_owner_ GUARDED_BY(queue_mu_);
  std::atomic<UringQueue*> queue_{nullptr};  // queue_owner_, once made
  SharedMutex local_mu_;
  std::map<uint64_t, LocalFile> local_ GUARDED_BY(local_mu_);
  // Reaches's answers by (peer incarnation, buffer addr, generation); at most
  // kMaxVisibleEntries.
  Mutex visible_mu_;
  std::map<std::tuple<uint64_t, uint64_t, uint64_t>, bool> visible_ GUARDED_BY(visible_mu_);
};

Status FileTransport::Visible(const FileWindow& file, uint64_t length, bool same_host) const {
  auto path = file.paths.find(hostname_);
  if (path == file.paths.end()) return NotFoundError("no path for host '" + hostname_ + "'");
  struct stat st {};
  if (::stat(path->second.c_str(), &st) != 0) {
    return NotFoundError(file::FileErrno(path->second, "stat", errno));
  }
  const bool block = S_ISBLK(st.st_mode);
  bool same = block || static_cast<uint64_t>(st.st_size) >= file.offset + length;
  if (same_host) {
    same = same && static_cast<uint64_t>(st.st_dev) == file.device &&
           static_cast<uint64_t>(st.st_ino) == file.inode;
  } else if (!block) {
    same = same && static_cast<uint64_t>(st.st_ino) == file.inode;  // device numbers are per kernel
  }
  return same ? Status::Ok() : NotFoundError("'" + path->second + "' here is another file");
}

Result<std::shared_ptr<FileHandle>> FileTransport::OpenRemote(const FileLink& link,
                                                              const Window& w) {
  const std::string where = "file buffer [" + Hex(w.addr) + ", +" + std::to_string(w.length) +
                            ") of segment '" + link.peer + "'";
  auto path = w.file.paths.find(hostname_);
  if (path == w.file.paths.end()) {
    std::string hosts;
    for (const auto& [h, p] : w.file.paths) hosts += (hosts.empty() ? "" : ", ") + h;
    return NotFoundError(where + " is not visible on host '" + hostname_ +
                         "': its path map names no path here (it names: " + hosts + ")");
  }
  Result<std::unique_ptr<FileHandle>> opened = FileHandle::Open(path->second);
  if (!opened.ok()) return opened.status().WithContext(where);
  const FileHandle& f = **opened;
  const uint64_t end = w.file.offset + w.length;
  bool same = f.size() >= end;
  if (link.same_host) {
    same = same && f.device() == w.file.device && f.inode() == w.file.inode;
  } else if (!f.block_device()) {
    same = same && f.inode() == w.file.inode;  // device numbers are per kernel
  }
  if (!same) {
    return NotFoundError(where + " is not visible on host '" + hostname_ + "': '" + path->second +
                         "' here is another file (device " + std::to_string(f.device()) +
                         ", inode " + std::to_string(f.inode()) + ", " + std::to_string(f.size()) +
                         " bytes; published device " + std::to_string(w.file.device) + ", inode " +
                         std::to_string(w.file.inode) + ", window end " + std::to_string(end) +
                         ")");
  }
  ASSIGN_OR_RETURN(UringQueue * queue, Queue());
  std::shared_ptr<FileHandle> handle(std::move(opened).value());
  queue->RegisterFile(handle.get());
  return handle;
}

Result<FileOp*> FileTransport::Resolve(FileLink& link, Slice* slice) {
  auto op = std::make_unique<FileOp>();
  uint64_t window_addr = 0;
  uint64_t window_length = 0;
  uint64_t window_offset = 0;
  if (link.local) {
    ASSIGN_OR_RETURN(
        op->pin, ctx_->PinRemoteAccess(slice->remote_addr, slice->length, slice->peer_incarnation,
                                       slice->remote_generation, kName));
    ReaderLock lock(local_mu_);
    auto it = local_.upper_bound(slice->remote_addr);
    if (it == local_.begin()) {
      return InternalError("no file buffer at " + Hex(slice->remote_addr) + " though pinned");
    }
    --it;
    // The pin holds the region, and the region its entry here (UnregisterFile runs only once
    // its pins drained): never another buffer's window.
    if (!RangeCovers(it->first, it->second.length, slice->remote_addr, slice->length)) {
      return InternalError("no file buffer covers [" + Hex(slice->remote_addr) + ", +" +
                           std::to_string(slice->length) + ") though pinned");
    }
    window_addr = it->first;
    window_length = it->second.length;
    window_offset = it->second.offset;
    op->file = it->second.handle;
  } else {
    MutexLock lock(link.mu);
    auto it = link.windows.upper_bound(slice->remote_addr);
    if (it == link.windows.begin() ||
        !RangeCovers(std::prev(it)->second.addr, std::prev(it)->second.length, slice->remote_addr,
                     slice->length)) {
      return InvalidArgumentError(
          "[" + Hex(slice->remote_addr) + ", +" + std::to_string(slice->length) +
          ") lies outside every file buffer of segment '" + link.peer + "'");
    }
    Window& w = std::prev(it)->second;
    if (w.generation != slice->remote_generation) {
      return StaleError("file buffer at " + Hex(w.addr) + " of segment '" + link.peer +
                        "' is generation " + std::to_string(w.generation) + ", the slice " +
                        std::to_string(slice->remote_generation));
    }
    if (w.handle == nullptr && w.open_error.ok()) {
      Result<std::shared_ptr<FileHandle>> h = OpenRemote(link, w);
      if (h.ok()) {
        w.handle = *h;
      } else {
        w.open_error = h.status();
      }
    }
    if (w.handle == nullptr) return w.open_error;
    window_addr = w.addr;
    window_length = w.length;
    window_offset = w.file.offset;
    op->file = w.handle;
  }
  op->slice = slice;
  op->op = slice->op;
  op->mem = slice->local_addr;
  op->offset = window_offset + (slice->remote_addr - window_addr);
  op->length = slice->length;
  op->window_end = window_offset + window_length;
  op->deadline = slice->deadline;
  op->direct = options_.direct_io && op->file->DirectAllowed(op->mem, op->offset, op->length);
  return op.release();
}

Status FileTransport::Submit(PeerLink& peer_link, std::span<Slice* const> slices) {
  auto& link = static_cast<FileLink&>(peer_link);
  std::vector<FileOp*> ops;
  ops.reserve(slices.size());
  std::vector<std::pair<Slice*, Status>> refused;
  std::unordered_map<const FileHandle*, Status> checked;  // CheckIntact, once per file
  std::unordered_map<const FileHandle*, std::shared_ptr<SyncGroup>> groups;
  for (Slice* slice : slices) {
    // Zero bytes touch nothing (and a zero-length read would look like the end of the file):
    // complete at once, as tcp does, also at the window's end where no pin can be taken.
    if (slice->length == 0) {
      refused.emplace_back(slice, Status::Ok());
      continue;
    }
    Result<FileOp*> op = Resolve(link, slice);
    if (!op.ok()) {
      refused.emplace_back(slice, op.status());
      continue;
    }
    FileOp* o = *op;
    auto [at, fresh] = checked.try_emplace(o->file.get());
    if (fresh) at->second = o->file->CheckIntact(o->window_end);
    if (!at->second.ok()) {
      refused.emplace_back(slice, at->second);
      o->pin.Release();
      delete o;
      continue;
    }
    if (slice->sync && slice->op == OpCode::kWrite) {
      std::shared_ptr<SyncGroup>& g = groups[o->file.get()];
      if (g == nullptr) {
        g = std::make_shared<SyncGroup>();
        g->file = o->file;
      }
      ++g->pending;
      o->group = g;
    }
    ops.push_back(o);
  }
  if (!ops.empty()) {
    // Ops exist only for handles, and handles only once the queue was made (Queue()).
    UringQueue* queue = queue_.load(std::memory_order_acquire);
    Status queued =
        queue != nullptr ? queue->Enqueue(ops) : InternalError("the file transport has no ring");
    if (!queued.ok()) {
      // Nothing of this call was queued or completed: undo, and let the caller hand it again
      // (Again) or complete every slice (any other error).
      for (FileOp* o : ops) {
        o->pin.Release();
        delete o;
      }
      return queued;
    }
  }
  for (auto& [slice, status] : refused) ctx_->CompleteSlice(slice, status);
  return Status::Ok();
}

}  // namespace

Status FileTransportAvailable() {
  static const Status probed = file::UringQueue::Probe();  // once per process
  return probed;
}

Result<std::unique_ptr<Transport>> CreateFileTransport(const FileTransportOptions& options) {
  if (options.queue_depth == 0 || options.queue_depth > 4096) {
    return InvalidArgumentError("file transport queue depth must be 1..4096 (got " +
                                std::to_string(options.queue_depth) + ")");
  }
  if (options.preferred_slice_size == 0) {
    return InvalidArgumentError("file transport slice size must be > 0");
  }
  return std::unique_ptr<Transport>(new FileTransport(options));
}

}  // namespace ferry
