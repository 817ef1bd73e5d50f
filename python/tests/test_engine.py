"""ferry.Engine (the Pythonic layer) against the same real peer process: torch / numpy /
bytearray / memoryview buffers, exceptions with codes, context managers, per-task figures,
asyncio, cancel, Stale after a re-registration, and the GIL."""

import asyncio
import gc
import hashlib
import logging

import numpy as np
import pytest
import torch

import ferry
from conftest import assert_releases_gil
from peer import kv_tensor, pattern


@pytest.fixture(scope="module")
def eng():
    with ferry.Engine(host="127.0.0.1", transports=["tcp"], task_timeout=10,
                      segment_cache_ttl=600) as e:
        yield e


def test_kv_handoff_tensors_and_buffers(eng, peer):
    kv = kv_tensor(seed=8)
    with eng.register(kv) as reg:
        assert reg.length == kv.numel() * kv.element_size()
        peer.call(cmd="zero")
        seg = eng.open(peer.name)
        assert eng.open(peer.name) is seg
        status = eng.write(seg, kv, peer.info["kv_addr"], notify=b"kv ready")
        assert status.state == "COMPLETED" and status.transferred_bytes == reg.length
        assert peer.call(cmd="wait_notify")["notifies"] == [[eng.name, "kv ready"]]
        assert peer.call(cmd="verify_kv", seed=8)["ok"]

    # numpy, bytearray and memoryview read back what the peer holds
    src = peer.info["src_addr"]
    want = pattern(peer.info["src_seed"], peer.info["src_bytes"])
    arr = np.zeros(4096, dtype=np.uint8)
    ba = bytearray(1000)
    mv = memoryview(bytearray(512))
    with eng.register_many([arr, ba, mv]):
        eng.read(peer.name, arr, src)
        batch = eng.submit([ferry.Read(ba, peer.name, src + 10),
                            ferry.Read(mv, peer.name, src + 20, length=100)])
        with batch:
            assert batch.wait().completed == 2
            tasks = batch.tasks()
        with pytest.raises(ferry.NotFoundError):
            batch.status()  # freed by the with block
    assert (arr == want[:4096]).all()
    assert bytes(ba) == want[10:1010].tobytes()
    assert bytes(mv[:100]) == want[20:120].tobytes() and bytes(mv[100:]) == bytes(412)
    # per-task figures
    assert [t.state for t in tasks] == ["COMPLETED", "COMPLETED"]
    assert [t.transferred_bytes for t in tasks] == [1000, 100]
    for t in tasks:
        assert t.transport == "tcp" and t.error is None and t.retries == 0
        assert t.slice_size == 256 << 10  # tcp's preferred size (slice_size 0)
        assert t.submitted_at <= t.ended_at and t.duration >= 0

    # segment buffers and probe
    bufs = eng.open(peer.name).buffers()
    assert sorted((b.addr, b.length) for b in bufs) == sorted(
        [(peer.info["kv_addr"], peer.info["kv_bytes"]),
         (peer.info["src_addr"], peer.info["src_bytes"])])
    assert all("tcp" in b.transports for b in bufs)
    assert eng.open(peer.name).probe() != 0

    # a managed buffer as numpy
    with eng.managed_buffer(8192) as mb:
        view = mb.numpy()
        view[:] = 7
        eng.write(peer.name, mb.view(), peer.info["kv_addr"])
        assert peer.call(cmd="digest", offset=0, length=8192)["sha256"] == \
            hashlib.sha256(bytes([7]) * 8192).hexdigest()


def test_asyncio_await_and_notifications(eng, peer):
    data = np.arange(256 * 1024, dtype=np.uint8)
    with eng.register(data):
        async def main():
            batches = [eng.submit(ferry.Write(data[i * 65536:(i + 1) * 65536], peer.name,
                                              peer.info["kv_addr"] + i * 65536))
                       for i in range(4)]
            results = await asyncio.wait_for(asyncio.gather(*batches), 30)
            for b in batches:
                b.free()
            return results

        results = asyncio.run(main())
        assert [r.state for r in results] == ["COMPLETED"] * 4
        assert peer.call(cmd="digest", offset=0, length=data.nbytes)["sha256"] == \
            hashlib.sha256(data.tobytes()).hexdigest()

        async def failing():
            with eng.submit(ferry.Write(data, peer.name, 4096)) as b:  # no buffer there
                await asyncio.wait_for(b, 30)

        with pytest.raises(ferry.InvalidArgumentError) as err:
            asyncio.run(failing())
        assert err.value.code == "InvalidArgument" and "outside" in err.value.message

    eng.notify(peer.name, "ping")
    assert peer.call(cmd="wait_notify")["notifies"] == [[eng.name, "ping"]]


def test_errors_carry_codes(eng, peer):
    kv = peer.info["kv_addr"]
    arr = np.zeros(1024, dtype=np.uint8)
    with pytest.raises(ferry.NotFoundError, match="no registered region"):
        eng.write(peer.name, arr, kv)  # arr is not registered
    with eng.register(arr):
        with pytest.raises(ferry.OverlapError):
            eng.register(arr[100:200])
        with pytest.raises(ferry.InvalidArgumentError, match="past the buffer"):
            eng.write(peer.name, arr, kv, length=arr.nbytes + 1)
        with pytest.raises(ferry.InvalidArgumentError, match="outside"):
            eng.write(peer.name, arr, kv + peer.info["kv_bytes"] - 10)
        with pytest.raises(TypeError):
            eng.write(peer.name, object(), kv)
        with pytest.raises(TypeError):
            eng.write(peer.name, arr, "0x1000")
        with pytest.raises(ferry.InvalidArgumentError, match="read-only"):
            eng.read(peer.name, b"immutable", kv)
    with pytest.raises(ferry.InvalidArgumentError, match="not contiguous"):
        eng.register(torch.zeros(8, 8).t())
    with pytest.raises(ferry.InvalidArgumentError, match="not C-contiguous"):
        eng.register(np.zeros((8, 8))[:, ::2])
    with pytest.raises(ferry.InvalidArgumentError, match="unknown engine option"):
        ferry.Engine(transports=["tcp"], no_such_option=1)
    with ferry.Engine(transports=["tcp"], max_segment_buffers=1) as small:
        with small.register(np.zeros(64, dtype=np.uint8)):
            with pytest.raises(ferry.InvalidArgumentError,
                               match=r"EngineOptions::max_segment_buffers"):
                small.register(np.zeros(64, dtype=np.uint8))
    with pytest.raises(ferry.FerryError) as err:
        eng.open("127.0.0.1:1")  # nobody there
    assert err.value.code in ("Unavailable", "NotFound", "Timeout")
    with pytest.raises(ferry.InvalidArgumentError):
        eng.open("not a segment name")


def test_stale_after_reregistration_is_never_reaimed(eng, peer):
    data = np.full(4096, 3, dtype=np.uint8)
    with eng.register(data):
        eng.write(peer.name, data, peer.info["kv_addr"])  # caches the descriptor
        peer.call(cmd="reregister")  # same address, new generation
        with pytest.raises(ferry.StaleError) as err:
            eng.write(peer.name, data, peer.info["kv_addr"])
        assert err.value.code == "Stale"
        eng.write(peer.name, data, peer.info["kv_addr"])  # planned against the refreshed one


def test_cancel_and_gil_on_a_frozen_peer(eng, peer):
    block = 64 * 1024
    kv = peer.info["kv_addr"]
    data = np.full(8 * block, 0xC5, dtype=np.uint8)
    with eng.register(data):
        peer.call(cmd="zero")
        seg = eng.open(peer.name)
        seg.probe()  # connected before the freeze
        # cancel: tasks waiting on a frozen peer (for its descriptor, forgotten first) end
        # CANCELED while it is still frozen, well before the fetch's bound (2 x request_timeout
        # = 10 s) and their deadline (10 s); a cancel that did nothing leaves them open, and
        # the wait below raises ferry.TimeoutError.
        eng._core.close(seg.id)
        peer.freeze()
        try:
            batch = eng.submit([ferry.Write(data[i * block:(i + 1) * block], seg, kv + i * block)
                                for i in range(8)])
            batch.cancel()
            with pytest.raises(ferry.CanceledError) as err:
                batch.wait(timeout=4)
            assert err.value.batch_status.state == "CANCELED"
            assert err.value.batch_status.failed == 8
            tasks = batch.tasks()
        finally:
            peer.thaw()
        assert [t.state for t in tasks] == ["CANCELED"] * 8
        assert all(t.error.code == "Canceled" and t.started_at is None for t in tasks)
        batch.free()
        # Nothing of them lands after the peer resumes: this write waits for the descriptor
        # behind their work on the peer's queue (forgotten again), so once it completed, that
        # work has run.
        eng._core.close(seg.id)
        eng.write(seg, data[:block], kv + 8 * block)
        assert peer.call(cmd="digest", offset=0, length=8 * block)["sha256"] == \
            hashlib.sha256(bytes(8 * block)).hexdigest(), "bytes of a canceled write landed"
        assert peer.call(cmd="digest", offset=8 * block, length=block)["sha256"] == \
            hashlib.sha256(data[:block].tobytes()).hexdigest()

        # the GIL: a wait (submitted before the other thread may run, so that only the wait is
        # checked), a sync write and a probe on the frozen peer let other threads run
        def wait(batch):
            with batch:
                return batch.wait().state

        assert assert_releases_gil(
            peer, wait, prepare=lambda: eng.submit(ferry.Write(data, peer.name, kv))) == \
            "COMPLETED"
        assert assert_releases_gil(
            peer, lambda: eng.write(peer.name, data, kv).state) == "COMPLETED"
        assert assert_releases_gil(peer, lambda: eng.open(peer.name).probe()) != 0


def test_managed_buffer_views_hold_their_memory():
    e = ferry.Engine(host="127.0.0.1", transports=["tcp"])
    n = 1 << 16
    with pytest.raises(ferry.InvalidArgumentError, match="host memory"):
        e.managed_buffer(n, "cuda:0")  # a view over device memory would crash when touched
    # A view outlives the buffer object and the Engine object: it holds both.
    a = e.managed_buffer(n).numpy()
    a[:] = 1
    e.close()
    with pytest.raises(ferry.InvalidArgumentError, match="closed"):
        e.managed_buffer(n)
    del e
    gc.collect()
    a[:] = 2
    assert int(a.sum()) == 2 * n
    core = a.base.obj.owner._core  # the engine, kept by the view

    # free() while a view is alive: the memory stays registered until the last view goes
    mb = a.base.obj.owner
    v = mb.view()
    mb.free()
    with pytest.raises(ferry.InvalidArgumentError, match="freed"):
        mb.view()
    assert mb.views_alive == 2
    del a
    assert core.read_bytes(mb.addr, 4) == b"\x02" * 4  # still registered (v is alive)
    del v
    assert mb.views_alive == 0
    with pytest.raises(ferry.InvalidArgumentError, match="not inside memory registered"):
        core.read_bytes(mb.addr, 4)  # freed with the last view


def test_registration_failing_to_unregister_at_collection_is_held(peer, caplog):
    """An unregister that fails at garbage collection (here: a READ into the memory is in
    flight to a frozen peer, and the drain times out) keeps the Registration, and the memory it
    holds, until a later retry succeeds."""
    import ferry.engine as fe

    caplog.set_level(logging.ERROR, logger="ferry")
    e = ferry.Engine(host="127.0.0.1", transports=["tcp"], task_timeout=10,
                     unregister_drain_timeout=0.2)
    data = np.zeros(1 << 16, dtype=np.uint8)
    reg = e.register(data)
    e.open(peer.name).probe()  # connected before the freeze
    peer.freeze()
    try:
        batch = e.submit(ferry.Read(data, peer.name, peer.info["src_addr"]))
        del reg  # collected now; its unregister waits 0.2 s for the READ, then fails
        assert fe.held_registrations() == 1
        assert "stays registered" in caplog.text
    finally:
        peer.thaw()
    assert batch.wait(timeout=30).state == "COMPLETED"
    batch.free()
    assert (data[:64] == pattern(peer.info["src_seed"], 64)).all()
    e.close()  # retries: the READ ended, so the unregister succeeds now
    assert fe.held_registrations() == 0
