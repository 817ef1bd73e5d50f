"""ferry: a transfer engine for moving bytes between registered memory of processes (tcp,
same-host shm/cxl, rdma), with metadata in etcd, redis, an HTTP metadata server or peer to peer.

Two layers over one engine:
  ferry.TransferEngine  Mooncake's Python API (mooncake.engine.TransferEngine): same method
                        names, arguments and int returns; swap the import and callers run.
  ferry.Engine          Pythonic: exceptions (ferry.FerryError and subclasses), numpy / torch /
                        buffer objects, context managers, per-task figures, asyncio awaitables.
Every call that can block or copy releases the GIL.
"""

from . import _ferry
from ._errors import (AgainError, AlreadyExistsError, BusyError, CanceledError, FerryError,
                      InternalError, InvalidArgumentError, NotFoundError, OverlapError,
                      PermissionDeniedError, StaleError, TimeoutError, UnavailableError)
from .engine import (Batch, BatchStatus, Engine, FileBuffer, ManagedBuffer, Notification, Read,
                     Registration, Request, Segment, SegmentBuffer, TaskStatus, Write)
from .mooncake import TransferEngine, TransferNotify, TransferOpcode
from .topology import local_topology

__version__ = _ferry.version()

__all__ = [
    "TransferEngine", "TransferNotify", "TransferOpcode",
    "Engine", "Segment", "SegmentBuffer", "Registration", "FileBuffer", "ManagedBuffer", "Batch",
    "BatchStatus", "TaskStatus", "Notification", "Request", "Write", "Read", "local_topology",
    "FerryError", "InvalidArgumentError", "NotFoundError", "AlreadyExistsError", "OverlapError",
    "StaleError", "AgainError", "BusyError", "TimeoutError", "UnavailableError",
    "PermissionDeniedError", "CanceledError", "InternalError",
]
