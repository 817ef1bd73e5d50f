"""ferry's errors: one exception per Status code, each a FerryError carrying the code and message.

The compiled core raises these through :func:`error_from_status`; the Mooncake-compatible layer
catches them and returns -1 (logging the message) instead.
"""

import builtins


class FerryError(Exception):
    """A ferry call failed. ``code`` is the Status code's stable name ("NotFound", "Stale", ...),
    ``message`` says what failed and why."""

    code = "Internal"

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self):
        return f"{self.code}: {self.message}"


class InvalidArgumentError(FerryError, ValueError):
    code = "InvalidArgument"


class NotFoundError(FerryError, LookupError):
    code = "NotFound"


class AlreadyExistsError(FerryError):
    code = "AlreadyExists"


class OverlapError(FerryError, ValueError):
    code = "Overlap"


class StaleError(FerryError):
    """The target restarted or re-registered the buffer since this request was planned; the
    request was not re-aimed. Look the address up again (the cache is already refreshed)."""

    code = "Stale"


class AgainError(FerryError):
    code = "Again"


class BusyError(FerryError):
    code = "Busy"


class TimeoutError(FerryError, builtins.TimeoutError):  # noqa: A001 (as asyncio.TimeoutError)
    code = "Timeout"


class UnavailableError(FerryError, ConnectionError):
    code = "Unavailable"


class PermissionDeniedError(FerryError, PermissionError):
    code = "PermissionDenied"


class CanceledError(FerryError):
    code = "Canceled"


class InternalError(FerryError):
    code = "Internal"


_BY_CODE = {
    cls.code: cls
    for cls in (InvalidArgumentError, NotFoundError, AlreadyExistsError, OverlapError,
                StaleError, AgainError, BusyError, TimeoutError, UnavailableError,
                PermissionDeniedError, CanceledError, InternalError)
}


def error_from_status(code, message):
    """The exception for a non-OK Status (an unknown code gives a plain FerryError)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return FerryError(message, code)
    return cls(message)


__all__ = ["FerryError", "error_from_status"] + [cls.__name__ for cls in _BY_CODE.values()]
