"""ferry.Engine: the Pythonic layer. Errors are exceptions (ferry.FerryError subclasses carrying
the Status code and message); buffers are whatever the caller holds (numpy arrays, torch
tensors, bytearray, memoryview, or an int address with a length); registrations and batches are
context managers; batches report per-task figures and can be awaited from asyncio.

    with ferry.Engine(host="127.0.0.1", transports=["tcp"]) as eng, eng.register(kv) as reg:
        peer = eng.open("10.0.0.2:15000")
        eng.write(peer, kv, remote_addr, notify=b"layer 0 done")
        batch = eng.submit([ferry.Write(kv[0], peer, remote_addr)])
        await batch                       # or batch.wait()

File buffers (the "file" transport, io_uring): a window of a file or block device registered as a
buffer of the segment, reached by requests as memory is (on this engine's own segment, or from a
peer that sees the same file through the path map):

    with eng.register_local_file("/mnt/nvme/kv.bin", 1 << 30) as fb:
        eng.write(eng.name, kv, fb.addr + 4096, sync=True)   # durable once it returns
        eng.read(eng.name, back, fb.addr + 4096)

Every call that can block or copy releases the GIL.
Thread contract: an Engine and its Segments may be used from many threads; a Batch, a
Registration, a FileBuffer and a ManagedBuffer belong to one thread at a time.

Lifetimes: a Registration, a ManagedBuffer (and every view of it) and a Batch each hold the
engine itself, so closing (or dropping) the Engine object never unregisters memory that is
still registered, frees a buffer still viewed, or loses an open batch; the engine stops once
none of them is left.
"""

import asyncio
import ctypes
import dataclasses
import functools
import logging
import os
import threading
import weakref

from . import _ferry
from ._buffers import span_of
from ._errors import FerryError, InvalidArgumentError, NotFoundError, error_from_status
from .topology import local_topology

log = logging.getLogger("ferry")

# Options given in seconds (float) and passed on in milliseconds.
_SECONDS_OPTIONS = ("task_timeout", "request_timeout", "lease_ttl", "segment_cache_ttl",
                    "unregister_drain_timeout", "idle_link_timeout")


def _error(pair):
    return None if pair is None else error_from_status(*pair)


@dataclasses.dataclass(frozen=True)
class BatchStatus:
    """A batch's summary: state "COMPLETED" when every task completed; once every task ended
    and one did not, "FAILED", "TIMEOUT" (the first error was a deadline) or "CANCELED" (it was
    Batch.cancel()); "PENDING" before."""

    state: str
    tasks: int
    completed: int
    failed: int
    transferred_bytes: int
    error: FerryError = None

    @property
    def done(self):
        return self.state not in ("PENDING", "WAITING")

    @classmethod
    def _of(cls, d):
        return cls(d["state"], d["tasks"], d["completed"], d["failed"], d["transferred_bytes"],
                   _error(d["error"]))


@dataclasses.dataclass(frozen=True)
class TaskStatus:
    """One task's state and figures. Times are seconds on time.monotonic()'s clock (None: not
    yet); ``retries`` counts attempts after the first (a reconnect or another transport);
    ``slice_size`` is the size the request was cut into (0: it went to no transport);
    ``file_io`` says how a file buffer's bytes moved: "direct" (O_DIRECT), "buffered" (the page
    cache) or "direct+buffered" ("" for memory)."""

    state: str
    transferred_bytes: int
    error: FerryError
    transport: str
    submitted_at: float
    started_at: float
    ended_at: float
    retries: int
    slice_size: int = 0
    file_io: str = ""

    @property
    def done(self):
        return self.state not in ("PENDING", "WAITING")

    @property
    def duration(self):
        """Seconds from submission to the end (None while open)."""
        if self.ended_at is None or self.submitted_at is None:
            return None
        return self.ended_at - self.submitted_at

    @property
    def queued(self):
        """Seconds from submission to its first slices being handed to a transport (or, the
        transport's queue being full, to the backlog that hands them over); None: not yet, or
        a local copy."""
        if self.started_at is None or self.submitted_at is None:
            return None
        return self.started_at - self.submitted_at

    @classmethod
    def _of(cls, d):
        return cls(d["state"], d["transferred_bytes"], _error(d["error"]), d["transport"],
                   d["submitted_at"], d["started_at"], d["ended_at"], d["retries"],
                   d["slice_size"], d["file_io"])


@dataclasses.dataclass(frozen=True)
class SegmentBuffer:
    """A buffer a remote segment published."""

    addr: int
    length: int
    location: str
    generation: int
    transports: tuple


@dataclasses.dataclass(frozen=True)
class Notification:
    name: str      # the sender's segment name
    payload: bytes


@dataclasses.dataclass(frozen=True)
class Request:
    """One transfer: ``op`` "read" or "write"; ``local`` anything span_of accepts; ``segment`` a
    Segment or a segment name; ``remote_addr`` in the target's address space; ``length``
    defaults to the local buffer's size; ``transport`` forces one ("" lets ferry choose);
    ``sync``: a write to a file buffer completes only after an fdatasync of its file (the sync
    writes of one submit to one file share one); ignored for memory."""

    op: str
    local: object
    segment: object
    remote_addr: int
    length: int = None
    transport: str = ""
    sync: bool = False


def Write(local, segment, remote_addr, length=None, transport="", sync=False):  # noqa: N802
    """A write of ``local`` into ``segment`` at ``remote_addr`` (``sync``: durable, for a file
    buffer, once it completed)."""
    return Request("write", local, segment, remote_addr, length, transport, sync)


def Read(local, segment, remote_addr, length=None, transport=""):  # noqa: N802
    """A read from ``segment`` at ``remote_addr`` into ``local`` (which must be writable)."""
    return Request("read", local, segment, remote_addr, length, transport)


class Segment:
    """A remote segment opened by Engine.open."""

    def __init__(self, engine, seg_id, name):
        self._engine = engine
        self.id = seg_id
        self.name = name

    def buffers(self):
        """The buffers it published, in address order."""
        return [SegmentBuffer(a, n, loc, g, tuple(t))
                for a, n, loc, g, t in self._engine._core.segment_buffers(self.id)]

    def probe(self):
        """Its engine's incarnation when it answers; raises otherwise."""
        return self._engine._core.probe(self.id)

    def notify(self, payload):
        self._engine.notify(self, payload)

    def __repr__(self):
        return f"Segment({self.name!r})"


# Registrations whose unregister failed at garbage collection: kept alive (with the caller's
# memory they hold) until a retry succeeds, since memory still registered may be written by
# peers. Retried by later register / register_many / Registration.close / Engine.close calls.
_held_lock = threading.Lock()
_held = []


def _retry_held():
    with _held_lock:
        held = list(_held)
    for reg in held:
        try:
            reg._unregister()
        except FerryError as e:
            log.debug("still registered, retrying later: %s: %s", reg, e)
            continue
        with _held_lock:
            if reg in _held:
                _held.remove(reg)
        log.info("unregistered %s (held since its collection)", reg)


def held_registrations():
    """How many collected Registrations are still held because unregistering them failed."""
    with _held_lock:
        return len(_held)


class Registration:
    """Memory registered with the engine, until close() (or the end of a ``with`` block, or its
    garbage collection). Holds the caller's object, and the engine, so that both stay alive
    meanwhile. When unregistering fails at garbage collection the error is logged and the
    object is kept (memory included) until a later retry succeeds (see held_registrations)."""

    def __init__(self, engine, spans, batch):
        self._core = engine._core
        self._spans = spans
        self._batch = batch
        self._open = True

    @property
    def addr(self):
        return self._spans[0].addr

    @property
    def length(self):
        return self._spans[0].length

    @property
    def spans(self):
        return list(self._spans)

    def close(self):
        """Unregisters (raises when that fails: the memory then stays registered)."""
        self._unregister()
        _retry_held()

    def _unregister(self):
        if not self._open:
            return
        if self._batch:
            self._core.unregister_batch([s.addr for s in self._spans])
        else:
            self._core.unregister(self._spans[0].addr)
        self._open = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        spans = ", ".join(f"0x{s.addr:x}+{s.length}" for s in self._spans)
        return f"Registration({spans})"

    def __del__(self):
        if not getattr(self, "_open", False):
            return
        try:
            self._unregister()
        except NotFoundError:
            self._open = False  # not registered (any more): nothing to hold
        except Exception as e:  # noqa: BLE001 (never raise at collection)
            try:
                log.error("unregistering %s at garbage collection failed: %s; it stays "
                          "registered (and its memory alive) until a later retry succeeds",
                          self, e)
                with _held_lock:
                    _held.append(self)  # resurrected: collected again once unregistered
            except Exception:  # noqa: BLE001 (interpreter shutting down)
                pass


class FileBuffer:
    """A window of a file or block device registered as a buffer of the engine's segment
    (Engine.register_local_file), until close() (or the end of a ``with`` block, or its garbage
    collection). Requests name its bytes as ``addr + (file offset - offset)``, on the engine's
    own segment or, from a peer that sees the file through the path map, on this one. ``addr``
    is never memory: it cannot be a request's local side. Holds the engine."""

    def __init__(self, engine, addr, path, length, offset):
        self._core = engine._core
        self.addr = addr
        self.path = path
        self.length = length
        self.offset = offset
        self._open = True

    def close(self):
        """Unregisters (raises when that fails, e.g. TimeoutError while I/O on it did not
        drain: it stays registered, closing)."""
        if self._open:
            self._core.unregister_file(self.addr)
            self._open = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"FileBuffer(0x{self.addr:x}: {self.path!r} "
                f"[{self.offset}, +{self.length}))")

    def __del__(self):
        if not getattr(self, "_open", False):
            return
        try:
            self.close()
        except NotFoundError:
            self._open = False  # unregistered already (Engine.unregister_local_file)
        except Exception as e:  # noqa: BLE001 (never raise at collection)
            try:
                log.error("unregistering %s at garbage collection failed: %s", self, e)
            except Exception:  # noqa: BLE001 (interpreter shutting down)
                pass


@functools.lru_cache(maxsize=64)
def _view_type(length):
    # A subclass of the ctypes array: it takes attributes (the owner) and weak references.
    return type("ManagedBufferView", (ctypes.c_char * length,), {})


def _view_gone(buffer_ref, _):
    # A view's exporter was collected: completes a free() that waited for it.
    buffer = buffer_ref()
    if buffer is None:
        return  # collected with the buffer, whose __del__ frees
    try:
        buffer._maybe_release()
    except Exception as e:  # noqa: BLE001 (runs at collection: never raise)
        log.error("freeing managed buffer 0x%x after its last view went: %s", buffer.addr, e)


class ManagedBuffer:
    """Registered memory ferry allocated (shareable with same-host peers when shm is
    installed). ``view()`` is a memoryview of it and ``numpy(dtype)`` an array over it; each
    holds this object (and so the engine), so the memory outlives every view. free() (or the
    end of a ``with`` block, or garbage collection) releases it: at once when no view is alive,
    otherwise once the last one is dropped; no new view is made after free()."""

    def __init__(self, engine, addr, length):
        self._core = engine._core
        self.addr = addr
        self.length = length
        self._views = []  # weak references to the exporters behind the views handed out
        self._free_requested = False
        self._freed = False

    def view(self):
        self._check()
        exporter = _view_type(self.length).from_address(self.addr)
        exporter.owner = self
        self._views = [r for r in self._views if r() is not None]
        self._views.append(weakref.ref(exporter, functools.partial(_view_gone,
                                                                   weakref.ref(self))))
        return memoryview(exporter).cast("B")

    def numpy(self, dtype="uint8"):
        import numpy as np
        return np.frombuffer(self.view(), dtype=dtype)

    @property
    def views_alive(self):
        """How many views (memoryviews, arrays over them) still use the memory."""
        return sum(1 for r in self._views if r() is not None)

    def free(self):
        """Releases the memory now, or (views still alive) once the last view is dropped."""
        if self._free_requested:
            return
        self._free_requested = True
        if self.views_alive == 0:
            self._release()

    def _release(self):
        if not self._freed:
            self._core.free_managed(self.addr, self.length)
            self._freed = True

    def _check(self):
        if self._free_requested:
            raise InvalidArgumentError(f"managed buffer 0x{self.addr:x} was freed")

    def _maybe_release(self):
        if self._free_requested and self.views_alive == 0:
            self._release()

    def __del__(self):
        # Every view holds this object: none is left.
        if getattr(self, "_freed", True):
            return
        try:
            self._release()
        except Exception as e:  # noqa: BLE001 (never raise at collection)
            try:
                log.error("freeing managed buffer 0x%x at garbage collection failed: %s; it "
                          "stays allocated until the engine stops", self.addr, e)
            except Exception:  # noqa: BLE001 (interpreter shutting down)
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()


class Batch:
    """Submitted transfers. wait() / ``await`` block until every task ended (within their
    deadline) and raise the first task's error when one did not complete; the ``with`` block
    (or free()) releases the batch, cancelling what is still open."""

    def __init__(self, engine, batch_id, keepalive):
        self._core = engine._core
        self.id = batch_id
        self._keepalive = keepalive
        self._freed = False

    def status(self):
        """The summary now (never blocks)."""
        return BatchStatus._of(self._core.batch_status(self.id))

    def tasks(self):
        """Each task's status and figures, in submission order."""
        core = self._core
        n = core.batch_status(self.id)["tasks"]
        return [TaskStatus._of(core.task_status(self.id, i)) for i in range(n)]

    @property
    def done(self):
        return self.status().done

    def wait(self, timeout=None):
        """Blocks until every task ended (``timeout`` seconds at most; None: the tasks' deadline
        bound). Returns the BatchStatus; raises the first error when a task did not complete,
        ferry.TimeoutError when tasks are still open at ``timeout``."""
        ms = -1 if timeout is None else max(0, int(timeout * 1000))
        return _raise_if_failed(BatchStatus._of(self._core.wait(self.id, ms)))

    def __await__(self):
        return _watcher_for(self._core).wait(self).__await__()

    def cancel(self):
        self._core.cancel(self.id)

    def free(self):
        """Releases the batch; open tasks are canceled first (and waited for, within their
        bound)."""
        if self._freed:
            return
        core = self._core
        if not BatchStatus._of(core.batch_status(self.id)).done:
            core.cancel(self.id)
            core.wait(self.id, -1)
        core.free(self.id)
        self._freed = True
        self._keepalive = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __del__(self):
        # Never blocks: open tasks are canceled, and a batch not yet ended (slices still with a
        # transport, ending by their deadline at the latest) is freed by a later sweep.
        if getattr(self, "_freed", True):
            return
        try:
            self._core.cancel(self.id)
            with _orphans_lock:
                _orphans.append((self._core, self.id, self._keepalive))
            _sweep_orphans()
        except Exception:  # noqa: BLE001 (never raise at collection; freed or engine gone)
            pass


# Batches dropped before they ended: (engine, id, the buffers they use), freed once ended by
# _sweep_orphans (on later submissions, on Engine.close, at the next dropped batch).
_orphans = []
_orphans_lock = threading.Lock()


def _sweep_orphans():
    with _orphans_lock:
        pending = list(_orphans)
    for entry in pending:
        core, batch_id, _ = entry
        try:
            if not BatchStatus._of(core.batch_status(batch_id)).done:
                continue
            core.free(batch_id)
        except FerryError:
            pass  # already gone: nothing to free
        with _orphans_lock:
            if entry in _orphans:
                _orphans.remove(entry)


def _raise_if_failed(status):
    if status.state != "COMPLETED":
        error = status.error or FerryError(f"batch ended {status.state}")
        error.batch_status = status
        raise error
    return status


class _CompletionWatcher:
    """Resolves asyncio futures of batches from the engine's completion eventfd: one reader per
    event loop, registered while some batch is awaited in it. The fd has a single reader (a
    read resets its count, and a loop keeps one reader per fd), so there is one watcher per
    engine, shared by every Engine object over it (_watcher_for)."""

    def __init__(self, core):
        self._core_ref = weakref.ref(core)  # the registry below must not keep the engine alive
        self._fd = core.completion_fd
        self._lock = threading.Lock()
        self._waiters = {}  # loop -> {batch id: [futures]}

    async def wait(self, batch):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            pending = self._waiters.setdefault(loop, {})
            if not pending:
                loop.add_reader(self._fd, self._on_readable, loop)
            pending.setdefault(batch.id, []).append(future)
        self._check(loop)  # it may have ended before the reader was in place
        return _raise_if_failed(await future)

    def _on_readable(self, loop):
        try:
            os.read(self._fd, 8)  # resets the count; the batches are checked below
        except BlockingIOError:
            pass
        self._check(loop)
        with self._lock:
            others = [other for other in self._waiters if other is not loop]
        for other in others:  # this loop drained the count they also wait on
            other.call_soon_threadsafe(self._check, other)

    def _check(self, loop):
        with self._lock:
            pending = dict(self._waiters.get(loop, {}))
        core = self._core_ref()  # alive while a batch is awaited: the Batch holds it
        finished = {}
        for batch_id, futures in pending.items():
            if core is None:
                finished[batch_id] = InvalidArgumentError("the engine stopped")
                continue
            try:
                status = BatchStatus._of(core.batch_status(batch_id))
            except FerryError as e:
                finished[batch_id] = e
                continue
            if status.done:
                finished[batch_id] = status
        with self._lock:
            waiting = self._waiters.get(loop, {})
            for batch_id, outcome in finished.items():
                for future in waiting.pop(batch_id, []):
                    if future.done():
                        continue
                    if isinstance(outcome, Exception):
                        future.set_exception(outcome)
                    else:
                        future.set_result(outcome)
            for batch_id in list(waiting):
                waiting[batch_id] = [f for f in waiting[batch_id] if not f.done()]
                if not waiting[batch_id]:
                    del waiting[batch_id]
            if loop in self._waiters and not waiting:
                del self._waiters[loop]
                loop.remove_reader(self._fd)


_watchers = weakref.WeakKeyDictionary()  # engine core -> its _CompletionWatcher
_watchers_lock = threading.Lock()


def _watcher_for(core):
    with _watchers_lock:
        watcher = _watchers.get(core)
        if watcher is None:
            watcher = _CompletionWatcher(core)
            _watchers[core] = watcher
        return watcher


class Engine:
    """A ferry engine.

    host: the address peers reach this engine at (its services listen there).
    metadata: "P2PHANDSHAKE" (default), "etcd://h:p", "redis://h:p", "http://h:p/metadata".
    transports: names ("tcp", "shm", "rdma", "cxl", "file") or ["auto"].
    name: the segment name (default "<host>:<port>", the only form P2PHANDSHAKE accepts).
    port: the RPC port (0: a free one).
    options: any other EngineOptions field by name (include/ferry/options.h); durations in
    seconds (``task_timeout=5``) or milliseconds with an _ms suffix.
    """

    def __init__(self, host="127.0.0.1", metadata="P2PHANDSHAKE", transports=("auto",), *,
                 name=None, port=0, **options):
        if isinstance(transports, str):
            transports = [t.strip() for t in transports.split(",")]
        opts = {"host": host, "metadata_conn": metadata, "transports": list(transports),
                "rpc_port": port}
        if name is not None:
            opts["local_server_name"] = name
        for key, value in options.items():
            if key in _SECONDS_OPTIONS:
                opts[key + "_ms"] = int(round(value * 1000))
            else:
                opts[key] = value
        core = _ferry.Engine()
        core.init(opts)
        self._core_obj = core
        self._segments = {}
        self._lock = threading.Lock()

    @classmethod
    def _over(cls, core):
        self = cls.__new__(cls)
        self._core_obj = core
        self._segments = {}
        self._lock = threading.Lock()
        return self

    @property
    def _core(self):
        core = self._core_obj
        if core is None:
            raise InvalidArgumentError("this ferry.Engine was closed")
        return core

    # ---- identity -------------------------------------------------------------------------

    @property
    def name(self):
        """This engine's segment name."""
        return self._core.name

    @property
    def port(self):
        return self._core.rpc_port

    @property
    def completion_fd(self):
        """An eventfd the engine increments whenever a batch ends, for event loops. It has a
        single reader, since a read resets the count: ``await batch`` reads it (one reader per
        engine, whatever the number of Engine objects over it), so do not read it yourself
        while awaiting batches."""
        return self._core.completion_fd

    def topology(self):
        return local_topology()

    def close(self):
        """Drops this object's hold on the engine (it stops once nothing else holds it: open
        registrations, managed buffers and their views, batches and other Engine objects over
        it each hold it)."""
        if self._core_obj is None:
            return
        self._core_obj = None
        self._segments = {}
        _retry_held()
        _sweep_orphans()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- memory ---------------------------------------------------------------------------

    def register(self, obj, length=None, location=None, remote_accessible=True):
        """Registers ``obj``'s memory (a writable buffer: peers may write into it) and returns a
        Registration (a context manager that unregisters)."""
        _retry_held()
        span = span_of(obj, length, writable=True, what="register")
        self._core.register(span.addr, span.length, location or span.location,
                            remote_accessible)
        return Registration(self, [span], batch=False)

    def register_many(self, objs, location=None):
        """Registers several buffers at once (all or nothing)."""
        _retry_held()
        spans = [span_of(o, writable=True, what="register_many") for o in objs]
        locs = {s.location for s in spans}
        loc = location or (locs.pop() if len(locs) == 1 else "*")
        self._core.register_batch([s.addr for s in spans], [s.length for s in spans], loc)
        return Registration(self, spans, batch=True)

    def managed_buffer(self, length, location="cpu"):
        return ManagedBuffer(self, self._core.allocate_managed(length, location), length)

    # ---- file buffers ---------------------------------------------------------------------

    def register_local_file(self, path, length, offset=0, host_paths=None, location="cpu"):
        """Registers the bytes [offset, offset + length) of the file or block device at
        ``path`` (it must be that large already) as a buffer of this segment, published with
        the file's identity and a path map: ``host_paths`` ({host name: path of the same file
        there}, for a volume several hosts mount) plus this host's path. Returns a FileBuffer
        (a context manager that unregisters). Needs the "file" transport (io_uring):
        InvalidArgumentError without it, or when the window leaves the file; NotFoundError /
        PermissionDeniedError when the file cannot be opened."""
        path = os.fspath(path)
        addr = self._core.register_file(path, length, offset, dict(host_paths or {}), location)
        return FileBuffer(self, addr, path, length, offset)

    def unregister_local_file(self, buffer):
        """Unregisters a file buffer (a FileBuffer, or its address): new requests to it fail
        Stale, the I/O in flight on it drains (bounded: TimeoutError, and it stays closing),
        then the file is closed. NotFoundError when no file buffer starts there."""
        if isinstance(buffer, FileBuffer):
            buffer.close()
        else:
            self._core.unregister_file(buffer)

    # ---- segments -------------------------------------------------------------------------

    def open(self, name):
        """The Segment of that name (fetching its descriptor)."""
        if isinstance(name, Segment):
            return name
        if not isinstance(name, str):
            raise TypeError(f"segment: expected a Segment or a name, not {type(name).__name__}")
        with self._lock:
            seg = self._segments.get(name)
        if seg is None:
            seg = Segment(self, self._core.open(name), name)
            with self._lock:
                self._segments[name] = seg
        return seg

    # ---- transfers ------------------------------------------------------------------------

    def _tuples(self, requests):
        tuples, keepalive = [], []
        for r in requests:
            if not isinstance(r, Request):
                raise TypeError(f"expected ferry.Write(...) / ferry.Read(...), not "
                                f"{type(r).__name__}")
            if r.op not in ("read", "write"):
                raise InvalidArgumentError(f"op must be 'read' or 'write', not {r.op!r}")
            reading = r.op == "read"
            span = span_of(r.local, r.length, writable=reading, what=f"{r.op} local buffer")
            if isinstance(r.remote_addr, bool) or not isinstance(r.remote_addr, int):
                raise TypeError("remote_addr must be an int, not "
                                f"{type(r.remote_addr).__name__}")
            seg = self.open(r.segment)
            op = _ferry.OP_READ if reading else _ferry.OP_WRITE
            tuples.append((op, span.addr, seg.id, r.remote_addr, span.length, r.transport,
                           bool(r.sync)))
            keepalive.append(span)
        return tuples, keepalive

    @staticmethod
    def _payload(notify):
        if notify is None:
            return None
        if isinstance(notify, str):
            return notify.encode()
        return bytes(notify)

    def submit(self, requests, notify=None):
        """Submits requests (ferry.Write / ferry.Read) as one batch; ``notify`` (bytes or str)
        reaches their single target after all of them completed. Returns the Batch."""
        if isinstance(requests, Request):
            requests = [requests]
        if _orphans:
            _sweep_orphans()
        tuples, keepalive = self._tuples(requests)
        batch_id = self._core.submit(tuples, self._payload(notify))
        return Batch(self, batch_id, keepalive)

    def transfer(self, requests, notify=None):
        """submit() and wait: the BatchStatus, or the first error raised."""
        if isinstance(requests, Request):
            requests = [requests]
        tuples, keepalive = self._tuples(requests)
        status = BatchStatus._of(self._core.transfer(tuples, self._payload(notify)))
        del keepalive
        return status

    def write(self, segment, local, remote_addr, length=None, notify=None, transport="",
              sync=False):
        """Writes ``local`` to ``segment`` at ``remote_addr`` and waits; raises on failure.
        ``sync``: for a file buffer, returns once the bytes were fdatasync'ed."""
        return self.transfer([Write(local, segment, remote_addr, length, transport, sync)],
                             notify)

    def read(self, segment, local, remote_addr, length=None, transport=""):
        """Reads into ``local`` from ``segment`` at ``remote_addr`` and waits."""
        return self.transfer([Read(local, segment, remote_addr, length, transport)])

    # ---- notifications --------------------------------------------------------------------

    def notifies(self):
        """Notifications received since the last call, in arrival order."""
        return [Notification(n, p) for n, p in self._core.notifies()]

    # ---- metrics --------------------------------------------------------------------------

    def get_metrics(self):
        """What the engine did since it started (include/ferry/metrics.h) as a dict:
        ``transfers`` (one dict per transport and peer segment: bytes_written, bytes_read,
        slices, completed, failed {reason: count}, retries, fallbacks, stale_refreshes,
        in_flight, latency {count, sum_seconds, buckets [(upper bound s, count)]}),
        ``transports`` (registrations, registered_bytes, registration_seconds, counters),
        ``metadata`` (store, ops {get/put/...: count, errors, not_found, latency}) and
        ``notifications`` (sent, send_failures, received, refused)."""
        return self._core.metrics()

    @property
    def metrics_port(self):
        """The port of the Prometheus endpoint (option metrics_port); 0 when there is none."""
        return self._core.metrics_port

    def notify(self, segment, payload):
        """Sends a notification now (Busy when the target holds too many)."""
        seg = self.open(segment)
        self._core.send_notify(seg.id, self._payload(payload))

