"""Turning what Python callers hold into (address, length): ints, numpy arrays, torch tensors,
bytearray, memoryview and anything else that exports a C-contiguous buffer."""

from . import _ferry
from ._errors import InvalidArgumentError


class Span:
    """A contiguous range of this process's memory and the object that keeps it alive.

    ``owner`` is the caller's object (or a memoryview of it, which also stops a bytearray from
    being resized while the span lives); ``location`` is "cpu", "cuda:<n>" or "*" (detect).
    """

    __slots__ = ("addr", "length", "owner", "location")

    def __init__(self, addr, length, owner=None, location="*"):
        self.addr = addr
        self.length = length
        self.owner = owner
        self.location = location

    def __repr__(self):
        return f"Span(addr=0x{self.addr:x}, length={self.length}, location={self.location!r})"


def _is_torch_tensor(obj):
    t = type(obj)
    return t.__module__.startswith("torch") and hasattr(obj, "data_ptr") and hasattr(
        obj, "element_size")


def span_of(obj, length=None, writable=False, what="buffer"):
    """The Span of ``obj``.

    obj: an int address (``length`` required), a torch tensor (contiguous; CPU or CUDA), or an
    object exporting the buffer protocol (numpy array, bytearray, memoryview, bytes, mmap...),
    C-contiguous, and writable when ``writable`` (the engine writes into it).
    length: optional; for objects, at most their size (a prefix of it).
    """
    if isinstance(obj, bool):
        raise TypeError(f"{what}: expected an address or a buffer, not bool")
    if isinstance(obj, int):
        if length is None:
            raise InvalidArgumentError(f"{what}: an int address needs a length")
        if obj < 0:
            raise InvalidArgumentError(f"{what}: negative address {obj}")
        return Span(obj, _check_length(length, None, what), None, "*")
    if isinstance(obj, Span):
        return Span(obj.addr, _check_length(length, obj.length, what), obj.owner, obj.location)
    if _is_torch_tensor(obj):
        if not obj.is_contiguous():
            raise InvalidArgumentError(
                f"{what}: tensor of shape {tuple(obj.shape)} is not contiguous "
                "(call .contiguous() first)")
        nbytes = obj.numel() * obj.element_size()
        device = obj.device
        if device.type == "cpu":
            location = "*"
        elif device.type == "cuda":
            location = f"cuda:{device.index if device.index is not None else 0}"
        else:
            raise InvalidArgumentError(f"{what}: tensors on '{device}' are not supported")
        return Span(obj.data_ptr(), _check_length(length, nbytes, what), obj, location)
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(
            f"{what}: expected an int address, a torch tensor, a numpy array, bytearray, "
            f"memoryview or another buffer, not {type(obj).__name__}") from None
    addr, nbytes, _ = _ferry.address_of(view, writable)
    return Span(addr, _check_length(length, nbytes, what), view, "*")


def _check_length(length, limit, what):
    if length is None:
        return limit
    if isinstance(length, bool) or not isinstance(length, int):
        raise TypeError(f"{what}: length must be an int, not {type(length).__name__}")
    if length < 0:
        raise InvalidArgumentError(f"{what}: negative length {length}")
    if limit is not None and length > limit:
        raise InvalidArgumentError(f"{what}: length {length} is past the buffer's {limit} bytes")
    return length
