"""ferry.Engine (the Pythonic layer) against the same real peer process: torch / numpy /
bytearray / memoryview buffers, exceptions with codes, context managers, per-task figures,
asyncio, cancel, Stale after a re-registration, and the GIL."""

import asyncio
import hashlib

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
    data = np.ones(1 << 20, dtype=np.uint8)
    with eng.register(data):
        eng.open(peer.name).probe()  # connected before the freeze
        # cancel: a batch to a frozen peer ends at once instead of at its deadline
        peer.freeze()
        try:
            batch = eng.submit(ferry.Write(data, peer.name, peer.info["kv_addr"]))
            batch.cancel()
        finally:
            peer.thaw()
        with batch:
            try:
                batch.wait(timeout=30)
            except ferry.FerryError as e:
                assert e.batch_status.state in ("FAILED", "CANCELED")
        # the GIL: a wait, a sync write and a probe on the frozen peer let other threads run
        def submit_and_wait():
            with eng.submit(ferry.Write(data, peer.name, peer.info["kv_addr"])) as b:
                return b.wait().state

        assert assert_releases_gil(peer, submit_and_wait) == "COMPLETED"
        assert assert_releases_gil(
            peer, lambda: eng.write(peer.name, data, peer.info["kv_addr"]).state) == "COMPLETED"
        assert assert_releases_gil(peer, lambda: eng.open(peer.name).probe()) != 0
