"""Mooncake-compatible TransferEngine: the method names, arguments and return conventions of
``mooncake.engine.TransferEngine``, so that callers switch with one import::

    from ferry import TransferEngine      # was: from mooncake.engine import TransferEngine

Every call returns what Mooncake's does (0 / -1, batch ids with 0 for failure, status codes);
a failure's Status message is logged on the "ferry" logger. Wrong argument types raise
TypeError (as Mooncake's binding does). What each call does in ferry is tabled in the README.
"""

import enum
import logging
import threading

from . import _ferry
from ._errors import FerryError, InvalidArgumentError
from ._options import engine_options
from .topology import local_topology_json

log = logging.getLogger("ferry")


class TransferOpcode(enum.IntEnum):
    READ = _ferry.OP_READ
    WRITE = _ferry.OP_WRITE
    Read = _ferry.OP_READ      # aliases
    Write = _ferry.OP_WRITE


class TransferNotify:
    """A notification: ``name`` and ``msg``. Sent with a write (the ``notify`` argument) or by
    send_notif, it reaches the target after the data of its transfer is in place. The receiver
    sees ``name`` = the sender's segment name (ferry fills it in; a name given here is not
    carried) and ``msg`` = the message. Unpacks as ``name, msg = n``."""

    __slots__ = ("name", "msg")

    def __init__(self, name="", msg=""):
        self.name = name
        self.msg = msg

    def __iter__(self):
        return iter((self.name, self.msg))

    def __eq__(self, other):
        return tuple(self) == tuple(other)

    def __repr__(self):
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"


def _notify_payload(notify):
    if notify is None:
        return None
    if isinstance(notify, TransferNotify):
        msg = notify.msg
    elif isinstance(notify, tuple) and len(notify) == 2:
        msg = notify[1]
    else:
        msg = notify
    if isinstance(msg, str):
        return msg.encode("utf-8", "surrogateescape")
    if isinstance(msg, (bytes, bytearray, memoryview)):
        return bytes(msg)
    raise TypeError("notify: expected TransferNotify, (name, msg), str or bytes, not "
                    f"{type(notify).__name__}")


# transfer_check_status's codes.
_DONE, _PENDING, _FAILED, _TIMED_OUT = 1, 0, -1, -2


class TransferEngine:
    """Thread-safe after initialize(); initialize once."""

    def __init__(self):
        self._core = None
        self._segments = {}  # segment name -> id (openSegment gives one id per name)
        self._lock = threading.Lock()

    # ---- set-up ---------------------------------------------------------------------------

    def initialize(self, local_hostname, metadata_server, protocol, device_name):
        """Starts the engine. ``local_hostname``: "host" or "host:port" (with P2PHANDSHAKE a bare
        host gets a free port: the segment name is f"{host}:{get_rpc_port()}").
        ``metadata_server``: "P2PHANDSHAKE", "etcd://h:p", a bare "h:p" (etcd), "redis://h:p",
        "http://h:p/metadata". ``protocol``: "tcp", "rdma", "shm" or "auto". 0 or -1."""
        return self.initialize_ext(local_hostname, metadata_server, protocol, device_name, None)

    def initialize_ext(self, local_hostname, metadata_server, protocol, device_name,
                       metadata_type, **options):
        """As initialize; ``metadata_type`` ("etcd", "redis", "http") says what a bare
        metadata_server "h:p" is. Extra keyword options are ferry.Engine's (e.g.
        task_timeout_ms=...)."""
        if self._core is not None:
            log.error("initialize: the engine is already initialized")
            return -1
        try:
            opts = engine_options(local_hostname, metadata_server, protocol, device_name,
                                  metadata_type, **options)
            core = _ferry.Engine()
            core.init(opts)
        except FerryError as e:
            log.error("initialize(%r, %r, %r): %s", local_hostname, metadata_server, protocol, e)
            return -1
        self._core = core
        return 0

    def get_rpc_port(self):
        return self._core.rpc_port if self._core is not None else -1

    def get_local_segment_name(self):
        """This engine's segment name ("" before initialize). ferry's addition."""
        return self._core.name if self._core is not None else ""

    def get_local_topology(self, device_name=None):
        """This host's devices as Mooncake's topology JSON string (see ferry.topology)."""
        return local_topology_json()

    def engine(self):
        """A ferry.Engine (the Pythonic layer) over this same engine."""
        from .engine import Engine
        return Engine._over(self._require("engine"))

    # ---- memory ---------------------------------------------------------------------------

    def register_memory(self, buffer_addr, capacity, location="*"):
        return self._run("register_memory", lambda c: c.register(buffer_addr, capacity, location))

    def unregister_memory(self, buffer_addr):
        return self._run("unregister_memory", lambda c: c.unregister(buffer_addr))

    def batch_register_memory(self, buffer_addresses, capacities):
        return self._run("batch_register_memory",
                         lambda c: c.register_batch(list(buffer_addresses), list(capacities)))

    def batch_unregister_memory(self, buffer_addresses):
        return self._run("batch_unregister_memory",
                         lambda c: c.unregister_batch(list(buffer_addresses)))

    def allocate_managed_buffer(self, length):
        """Registered memory of ``length`` bytes: its address, 0 on failure."""
        return self._run("allocate_managed_buffer", lambda c: c.allocate_managed(length),
                         failure=0, ok=None)

    def free_managed_buffer(self, buffer_addr, length):
        return self._run("free_managed_buffer", lambda c: c.free_managed(buffer_addr, length))

    def write_bytes_to_buffer(self, dest_address, src_ptr, length):
        """Copies ``length`` bytes of ``src_ptr`` (bytes-like) to registered memory. 0 / -1."""
        return self._run("write_bytes_to_buffer",
                         lambda c: c.write_bytes(dest_address, src_ptr, length))

    def read_bytes_from_buffer(self, source_address, length):
        """``length`` bytes of registered memory; b"" on failure."""
        return self._run("read_bytes_from_buffer", lambda c: c.read_bytes(source_address, length),
                         failure=b"", ok=None)

    # ---- transfers ------------------------------------------------------------------------

    def transfer_sync_write(self, target_hostname, buffer, peer_buffer_address, length,
                            notify=None):
        return self.transfer_sync(target_hostname, buffer, peer_buffer_address, length,
                                  TransferOpcode.WRITE, notify)

    def transfer_sync_read(self, target_hostname, buffer, peer_buffer_address, length):
        return self.transfer_sync(target_hostname, buffer, peer_buffer_address, length,
                                  TransferOpcode.READ)

    def transfer_sync(self, target_hostname, buffer, peer_buffer_address, length, opcode,
                      notify=None):
        """One transfer, blocking until it ended (at most its deadline). 0 / -1."""
        return self._batch_sync("transfer_sync", target_hostname, [buffer],
                                [peer_buffer_address], [length], int(opcode), notify)

    def batch_transfer_sync_write(self, target_hostname, buffers, peer_buffer_addresses, lengths,
                                  notify=None):
        return self._batch_sync("batch_transfer_sync_write", target_hostname, buffers,
                                peer_buffer_addresses, lengths, _ferry.OP_WRITE, notify)

    def batch_transfer_sync_read(self, target_hostname, buffers, peer_buffer_addresses, lengths):
        return self._batch_sync("batch_transfer_sync_read", target_hostname, buffers,
                                peer_buffer_addresses, lengths, _ferry.OP_READ, None)

    def batch_transfer_async_write(self, target_hostname, buffers, peer_buffer_addresses,
                                   lengths, notify=None):
        """Submits and returns the batch id (0 on failure); see get_batch_transfer_status."""
        return self._batch_async("batch_transfer_async_write", target_hostname, buffers,
                                 peer_buffer_addresses, lengths, _ferry.OP_WRITE, notify)

    def batch_transfer_async_read(self, target_hostname, buffers, peer_buffer_addresses, lengths):
        return self._batch_async("batch_transfer_async_read", target_hostname, buffers,
                                 peer_buffer_addresses, lengths, _ferry.OP_READ, None)

    def transfer_submit_write(self, target_hostname, buffer, peer_buffer_address, length,
                              notify=None):
        """Submits one write; its batch id (0 on failure), for transfer_check_status."""
        return self._batch_async("transfer_submit_write", target_hostname, [buffer],
                                 [peer_buffer_address], [length], _ferry.OP_WRITE, notify)

    def transfer_submit_read(self, target_hostname, buffer, peer_buffer_address, length):
        return self._batch_async("transfer_submit_read", target_hostname, [buffer],
                                 [peer_buffer_address], [length], _ferry.OP_READ, None)

    def get_batch_transfer_status(self, batch_ids):
        """Blocks until every batch ended (each within its deadline), frees them: 0 when all
        completed, -1 otherwise (or for an id that is not a live batch)."""
        core = self._core
        if core is None:
            log.error("get_batch_transfer_status: the engine is not initialized")
            return -1
        if isinstance(batch_ids, int):
            batch_ids = [batch_ids]
        result = 0
        for batch in batch_ids:
            try:
                summary = core.wait(batch)
                if summary["state"] != "COMPLETED":
                    log.error("batch %d %s: %s", batch, summary["state"], _reason(summary))
                    result = -1
                core.free(batch)
            except FerryError as e:
                log.error("get_batch_transfer_status(%r): %s", batch, e)
                result = -1
        return result

    def transfer_check_status(self, batch_id):
        """1 completed, 0 still running, -1 failed or canceled (or an unknown id), -2 timed
        out. As Mooncake's: 1 and -1 free the batch (so a later check of that id is -1); -2
        leaves it allocated (a later check answers -2 again); get_batch_transfer_status([id])
        frees it."""
        core = self._core
        if core is None:
            log.error("transfer_check_status: the engine is not initialized")
            return _FAILED
        try:
            summary = core.batch_status(batch_id)
            state = summary["state"]
            if state in ("PENDING", "WAITING"):
                return _PENDING
            if state == "TIMEOUT":
                log.error("batch %d %s: %s", batch_id, state, _reason(summary))
                return _TIMED_OUT
            core.free(batch_id)
        except FerryError as e:
            log.error("transfer_check_status(%r): %s", batch_id, e)
            return _FAILED
        if state == "COMPLETED":
            return _DONE
        log.error("batch %d %s: %s", batch_id, state, _reason(summary))
        return _FAILED

    # ---- segments, notifications, probes --------------------------------------------------

    def get_first_buffer_address(self, segment_name):
        """The lowest address the segment published (0 on failure or when it has none)."""
        def first(core):
            buffers = core.segment_buffers(self._open(core, segment_name))
            if not buffers:
                raise InvalidArgumentError(f"segment '{segment_name}' publishes no buffer")
            return buffers[0][0]
        return self._run("get_first_buffer_address", first, failure=0, ok=None)

    def get_notifies(self):
        """Notifications received since the last call: [TransferNotify(name, msg)], name = the
        sender's segment name."""
        core = self._core
        if core is None:
            return []
        return [TransferNotify(name, payload.decode("utf-8", "surrogateescape"))
                for name, payload in core.notifies()]

    def send_notif(self, target_hostname, notify):
        """Sends a notification (TransferNotify, (name, msg), str or bytes) now. 0 / -1."""
        payload = _notify_payload(notify)
        if payload is None:
            raise TypeError("send_notif: notify is None")
        return self._run("send_notif",
                         lambda c: c.send_notify(self._open(c, target_hostname), payload))

    send_notify = send_notif

    def get_metrics(self):
        """The engine's metrics as a dict (see ferry.Engine.get_metrics); {} before
        initialize. ferry's addition."""
        core = self._core
        return core.metrics() if core is not None else {}

    def send_probe(self, target_hostname):
        """0 when the target's engine answers, -1 otherwise."""
        return self._run("send_probe", lambda c: c.probe(self._open(c, target_hostname)))

    # ---- internals ------------------------------------------------------------------------

    def _require(self, what):
        if self._core is None:
            raise FerryError(f"{what}: the engine is not initialized (call initialize first)",
                             "InvalidArgument")
        return self._core

    def _open(self, core, name):
        if not isinstance(name, str):
            raise TypeError(f"target_hostname: expected str, not {type(name).__name__}")
        with self._lock:
            seg = self._segments.get(name)
        if seg is None:
            seg = core.open(name)
            with self._lock:
                self._segments[name] = seg
        return seg

    def _run(self, what, fn, failure=-1, ok=0):
        try:
            result = fn(self._require(what))
        except FerryError as e:
            log.error("%s: %s", what, e)
            return failure
        return ok if ok is not None else result

    def _requests(self, core, target, buffers, peer_addresses, lengths, op):
        if not (len(buffers) == len(peer_addresses) == len(lengths)):
            raise InvalidArgumentError(
                f"{len(buffers)} buffers, {len(peer_addresses)} peer addresses and "
                f"{len(lengths)} lengths: the lists must be equally long")
        seg = self._open(core, target)
        return [(op, b, seg, p, n, "") for b, p, n in zip(buffers, peer_addresses, lengths)]

    def _batch_sync(self, what, target, buffers, peers, lengths, op, notify):
        payload = _notify_payload(notify)
        return self._run(what, lambda c: c.transfer(
            self._requests(c, target, buffers, peers, lengths, op), payload))

    def _batch_async(self, what, target, buffers, peers, lengths, op, notify):
        payload = _notify_payload(notify)
        return self._run(what, lambda c: c.submit(
            self._requests(c, target, buffers, peers, lengths, op), payload), failure=0, ok=None)


def _reason(summary):
    error = summary.get("error")
    return f"{error[0]}: {error[1]}" if error else "no reason given"
