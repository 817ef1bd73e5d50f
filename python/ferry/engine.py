"""ferry.Engine: the Pythonic layer. Errors are exceptions (ferry.FerryError subclasses carrying
the Status code and message); buffers are whatever the caller holds (numpy arrays, torch
tensors, bytearray, memoryview, or an int address with a length); registrations and batches are
context managers; batches report per-task figures and can be awaited from asyncio.

    with ferry.Engine(host="127.0.0.1", transports=["tcp"]) as eng, eng.register(kv) as reg:
        peer = eng.open("10.0.0.2:15000")
        eng.write(peer, kv, remote_addr, notify=b"layer 0 done")
        batch = eng.submit([ferry.Write(kv[0], peer, remote_addr)])
        await batch                       # or batch.wait()

Every call that can block or copy releases the GIL.
Thread contract: an Engine and its Segments may be used from many threads; a Batch, a
Registration and a ManagedBuffer belong to one thread at a time.
"""

import asyncio
import ctypes
import dataclasses
import os
import threading

from . import _ferry
from ._buffers import span_of
from ._errors import FerryError, InvalidArgumentError, error_from_status
from .topology import local_topology

# Options given in seconds (float) and passed on in milliseconds.
_SECONDS_OPTIONS = ("task_timeout", "request_timeout", "lease_ttl", "segment_cache_ttl",
                    "unregister_drain_timeout", "idle_link_timeout")


def _error(pair):
    return None if pair is None else error_from_status(*pair)


@dataclasses.dataclass(frozen=True)
class BatchStatus:
    """A batch's summary: state "COMPLETED" when every task completed, "FAILED" / "TIMEOUT" once
    every task ended and one did not, "PENDING" before."""

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
    yet); ``retries`` counts attempts after the first (a reconnect or another transport)."""

    state: str
    transferred_bytes: int
    error: FerryError
    transport: str
    submitted_at: float
    started_at: float
    ended_at: float
    retries: int

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
        """Seconds from submission to its first slice going out (None: not yet, or a local
        copy)."""
        if self.started_at is None or self.submitted_at is None:
            return None
        return self.started_at - self.submitted_at

    @classmethod
    def _of(cls, d):
        return cls(d["state"], d["transferred_bytes"], _error(d["error"]), d["transport"],
                   d["submitted_at"], d["started_at"], d["ended_at"], d["retries"])


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
    defaults to the local buffer's size; ``transport`` forces one ("" lets ferry choose)."""

    op: str
    local: object
    segment: object
    remote_addr: int
    length: int = None
    transport: str = ""


def Write(local, segment, remote_addr, length=None, transport=""):  # noqa: N802
    """A write of ``local`` into ``segment`` at ``remote_addr``."""
    return Request("write", local, segment, remote_addr, length, transport)


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


class Registration:
    """Memory registered with the engine, until close() (or the end of a ``with`` block, or its
    garbage collection). Holds the caller's object so that it stays alive meanwhile."""

    def __init__(self, engine, spans, batch):
        self._engine = engine
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
        if not self._open:
            return
        core = self._engine._core
        if self._batch:
            core.unregister_batch([s.addr for s in self._spans])
        else:
            core.unregister(self._spans[0].addr)
        self._open = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (best effort at collection)
            pass


class ManagedBuffer:
    """Registered memory ferry allocated (shareable with same-host peers when shm is
    installed). ``view()`` is a memoryview of it and ``numpy(dtype)`` an array over it; both are
    valid until free()."""

    def __init__(self, engine, addr, length):
        self._engine = engine
        self.addr = addr
        self.length = length
        self._freed = False

    def view(self):
        self._check()
        return memoryview((ctypes.c_char * self.length).from_address(self.addr)).cast("B")

    def numpy(self, dtype="uint8"):
        import numpy as np
        return np.frombuffer(self.view(), dtype=dtype)

    def free(self):
        if not self._freed:
            self._engine._core.free_managed(self.addr, self.length)
            self._freed = True

    def _check(self):
        if self._freed:
            raise InvalidArgumentError(f"managed buffer 0x{self.addr:x} was freed")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()


class Batch:
    """Submitted transfers. wait() / ``await`` block until every task ended (within their
    deadline) and raise the first task's error when one did not complete; the ``with`` block
    (or free()) releases the batch, cancelling what is still open."""

    def __init__(self, engine, batch_id, keepalive):
        self._engine = engine
        self.id = batch_id
        self._keepalive = keepalive
        self._freed = False

    def status(self):
        """The summary now (never blocks)."""
        return BatchStatus._of(self._engine._core.batch_status(self.id))

    def tasks(self):
        """Each task's status and figures, in submission order."""
        core = self._engine._core
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
        return _raise_if_failed(BatchStatus._of(self._engine._core.wait(self.id, ms)))

    def __await__(self):
        return self._engine._watcher().wait(self).__await__()

    def cancel(self):
        self._engine._core.cancel(self.id)

    def free(self):
        """Releases the batch; open tasks are canceled first (and waited for, within their
        bound)."""
        if self._freed:
            return
        core = self._engine._core
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


def _raise_if_failed(status):
    if status.state != "COMPLETED":
        error = status.error or FerryError(f"batch ended {status.state}")
        error.batch_status = status
        raise error
    return status


class _CompletionWatcher:
    """Resolves asyncio futures of batches from the engine's completion eventfd: one reader per
    event loop, registered while some batch is awaited in it."""

    def __init__(self, core):
        self._core = core
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
        finished = {}
        for batch_id, futures in pending.items():
            try:
                status = BatchStatus._of(self._core.batch_status(batch_id))
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


class Engine:
    """A ferry engine.

    host: the address peers reach this engine at (its services listen there).
    metadata: "P2PHANDSHAKE" (default), "etcd://h:p", "redis://h:p", "http://h:p/metadata".
    transports: names ("tcp", "shm", "rdma", "cxl") or ["auto"].
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
        self._core = core
        self._segments = {}
        self._lock = threading.Lock()
        self._watcher_obj = None

    @classmethod
    def _over(cls, core):
        self = cls.__new__(cls)
        self._core = core
        self._segments = {}
        self._lock = threading.Lock()
        self._watcher_obj = None
        return self

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
        """An eventfd the engine increments whenever a batch ends (for event loops)."""
        return self._core.completion_fd

    def topology(self):
        return local_topology()

    def close(self):
        """Drops this object's hold on the engine (it stops once nothing else holds it)."""
        self._core = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- memory ---------------------------------------------------------------------------

    def register(self, obj, length=None, location=None, remote_accessible=True):
        """Registers ``obj``'s memory (a writable buffer: peers may write into it) and returns a
        Registration (a context manager that unregisters)."""
        span = span_of(obj, length, writable=True, what="register")
        self._core.register(span.addr, span.length, location or span.location,
                            remote_accessible)
        return Registration(self, [span], batch=False)

    def register_many(self, objs, location=None):
        """Registers several buffers at once (all or nothing)."""
        spans = [span_of(o, writable=True, what="register_many") for o in objs]
        locs = {s.location for s in spans}
        loc = location or (locs.pop() if len(locs) == 1 else "*")
        self._core.register_batch([s.addr for s in spans], [s.length for s in spans], loc)
        return Registration(self, spans, batch=True)

    def managed_buffer(self, length, location="cpu"):
        return ManagedBuffer(self, self._core.allocate_managed(length, location), length)

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
            tuples.append((op, span.addr, seg.id, r.remote_addr, span.length, r.transport))
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

    def write(self, segment, local, remote_addr, length=None, notify=None, transport=""):
        """Writes ``local`` to ``segment`` at ``remote_addr`` and waits; raises on failure."""
        return self.transfer([Write(local, segment, remote_addr, length, transport)], notify)

    def read(self, segment, local, remote_addr, length=None, transport=""):
        """Reads into ``local`` from ``segment`` at ``remote_addr`` and waits."""
        return self.transfer([Read(local, segment, remote_addr, length, transport)])

    # ---- notifications --------------------------------------------------------------------

    def notifies(self):
        """Notifications received since the last call, in arrival order."""
        return [Notification(n, p) for n, p in self._core.notifies()]

    def notify(self, segment, payload):
        """Sends a notification now (Busy when the target holds too many)."""
        seg = self.open(segment)
        self._core.send_notify(seg.id, self._payload(payload))

    def _watcher(self):
        with self._lock:
            if self._watcher_obj is None:
                self._watcher_obj = _CompletionWatcher(self._core)
            return self._watcher_obj

