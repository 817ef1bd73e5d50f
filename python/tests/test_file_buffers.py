"""File buffers through ferry.Engine: a window of a file in a temporary directory, registered with
register_local_file, written from a numpy buffer and read back through the engine (the file
transport, io_uring) by its own engine and by a second engine that opens the same file through
the path map; the bytes are checked on disk too. Requests that leave the window raise and leave
the file as it was; a durable write completes; unregistering, and bad registrations, raise the
module's exceptions."""

import numpy as np
import pytest

import ferry

KIB = 1024


@pytest.fixture(scope="module")
def eng():
    try:
        e = ferry.Engine(host="127.0.0.1", transports=["tcp", "file"], task_timeout=10)
    except ferry.UnavailableError as err:
        # io_uring refused here (a seccomp filter, kernel.io_uring_disabled): no file transport.
        pytest.skip(f"file transport unavailable: {err}")
    with e:
        yield e


def test_numpy_into_a_file_buffer_and_back(eng, tmp_path):
    size, window_offset, window = 1024 * KIB, 64 * KIB, 512 * KIB
    path = tmp_path / "kv.bin"
    path.write_bytes(b"\xaa" * size)
    expected = np.full(size, 0xAA, dtype=np.uint8)  # the file as it must be
    src = np.random.default_rng(14).integers(0, 256, window, dtype=np.uint8)
    back = np.zeros(window, dtype=np.uint8)

    with eng.register_many([src, back]), \
            eng.register_local_file(path, window, offset=window_offset) as fb:
        assert isinstance(fb, ferry.FileBuffer) and fb.length == window and fb.path == str(path)
        seg = eng.open(eng.name)
        published = [b for b in seg.buffers() if b.addr == fb.addr]
        assert len(published) == 1 and published[0].length == window
        assert "file" in published[0].transports

        # The whole window, durable: on disk (and in no other place) once it returned.
        status = eng.write(seg, src, fb.addr, sync=True)
        assert status.state == "COMPLETED" and status.transferred_bytes == window
        expected[window_offset:window_offset + window] = src
        assert np.array_equal(np.fromfile(path, dtype=np.uint8), expected)

        # Read back, with per-task figures: the file transport carried it, and says how.
        with eng.submit([ferry.Read(back, seg, fb.addr)]) as batch:
            assert batch.wait().completed == 1
            (task,) = batch.tasks()
        assert task.transport == "file" and task.error is None
        assert task.file_io in ("direct", "buffered", "direct+buffered")
        assert np.array_equal(back, src)

        # Odd sizes and offsets go through the page cache, and land exactly there.
        odd = src[7:7 + 1001]
        eng.write(seg, odd, fb.addr + 4093)
        expected[window_offset + 4093:window_offset + 4093 + 1001] = odd
        part = np.zeros(1001, dtype=np.uint8)
        with eng.register(part):
            eng.read(seg, part, fb.addr + 4093)
        assert np.array_equal(part, odd)

        # A second engine sees the same file through the path map and reads it itself.
        with ferry.Engine(host="127.0.0.1", transports=["tcp", "file"]) as other:
            theirs = np.zeros(window, dtype=np.uint8)
            with other.register(theirs):
                other.read(eng.name, theirs, fb.addr, transport="file")
            assert np.array_equal(theirs, expected[window_offset:window_offset + window])

        # Requests leaving the window raise, and move nothing on either side of it.
        for offset, length in ((window - 10, 20), (-1, 2), (window, 1)):
            with pytest.raises((ferry.InvalidArgumentError, ferry.NotFoundError)):
                eng.write(seg, src[:length], fb.addr + offset)
        with pytest.raises((ferry.InvalidArgumentError, ferry.NotFoundError)):
            eng.read(seg, back[:8192], fb.addr + window - 4096)
        assert np.array_equal(np.fromfile(path, dtype=np.uint8), expected)

    # Unregistered by the with block: gone from the segment, requests to it fail.
    with pytest.raises(ferry.NotFoundError):
        eng.unregister_local_file(fb.addr)
    with eng.register(src), pytest.raises(ferry.FerryError):
        eng.write(eng.name, src[:16], fb.addr)
    assert np.array_equal(np.fromfile(path, dtype=np.uint8), expected)


def test_bad_file_registrations_raise(eng, tmp_path):
    path = tmp_path / "small.bin"
    path.write_bytes(bytes(4096))
    with pytest.raises(ferry.InvalidArgumentError, match="past its end"):
        eng.register_local_file(path, 4096, offset=1)
    with pytest.raises(ferry.NotFoundError):
        eng.register_local_file(tmp_path / "missing.bin", 16)
    with pytest.raises(ferry.InvalidArgumentError):
        eng.register_local_file(path, 0)
    fb = eng.register_local_file(path, 4096)
    eng.unregister_local_file(fb)
    fb.close()  # closed already: nothing more to do
    with pytest.raises(ferry.NotFoundError):
        eng.unregister_local_file(fb.addr)
    by_address = eng.register_local_file(path, 4096)
    eng.unregister_local_file(by_address.addr)
    del by_address  # its collection finds it unregistered (NotFound), and says nothing
