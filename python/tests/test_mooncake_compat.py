"""ferry.TransferEngine (Mooncake's API) against a real peer process: every call family, both
directions, notifications, probes, managed buffers, bad arguments, and the GIL."""

import asyncio
import hashlib
import json
import logging
import time

import numpy as np
import pytest

import ferry
from conftest import assert_releases_gil
from peer import kv_tensor, pattern

BLOCK = 4096


@pytest.fixture(scope="module")
def engine():
    e = ferry.TransferEngine()
    # A bare host with P2PHANDSHAKE: the engine picks the port, the name is host:port.
    assert e.initialize_ext("127.0.0.1", "P2PHANDSHAKE", "tcp", "", None,
                            segment_cache_ttl_ms=600000, task_timeout_ms=10000) == 0
    assert e.get_local_segment_name() == f"127.0.0.1:{e.get_rpc_port()}"
    return e


@pytest.fixture(scope="module")
def local(engine):
    """A registered 1 MiB source/destination buffer of known content."""
    buf = pattern(5, 1 << 20)
    assert engine.register_memory(int(buf.ctypes.data), buf.nbytes) == 0
    yield buf
    assert engine.unregister_memory(int(buf.ctypes.data)) == 0


def digest(array, offset, length):
    return hashlib.sha256(array.view(np.uint8)[offset:offset + length].tobytes()).hexdigest()


def addr(a, offset=0):
    return int(a.ctypes.data) + offset


def test_kv_cache_handoff_with_notify(engine, peer):
    """Prefill writes a layers x blocks x heads x head_dim fp16 KV cache into decode's tensor
    and notifies; decode verifies every element."""
    kv = kv_tensor(seed=3)
    assert engine.register_memory(kv.data_ptr(), kv.numel() * kv.element_size()) == 0
    try:
        peer.call(cmd="zero")
        # One batch per layer, the last one carrying the notification.
        layers = kv.shape[0]
        per_layer = kv[0].numel() * kv.element_size()
        for layer in range(layers):
            notify = ferry.TransferNotify("kv", "kv ready") if layer == layers - 1 else None
            src = kv.data_ptr() + layer * per_layer
            dst = peer.info["kv_addr"] + layer * per_layer
            assert engine.transfer_sync_write(peer.name, src, dst, per_layer, notify) == 0
        got = peer.call(cmd="wait_notify")["notifies"]
        assert got == [[engine.get_local_segment_name(), "kv ready"]]
        assert peer.call(cmd="verify_kv", seed=3) == {"ok": True, "mismatched_elements": 0}
    finally:
        assert engine.unregister_memory(kv.data_ptr()) == 0


def test_every_write_family(engine, peer, local):
    kv = peer.info["kv_addr"]
    # sync
    assert engine.transfer_sync_write(peer.name, addr(local), kv, BLOCK) == 0
    assert engine.transfer_sync(peer.name, addr(local, BLOCK), kv + BLOCK, BLOCK,
                                ferry.TransferOpcode.WRITE) == 0
    # batch sync: blocks 2..5 from scattered local offsets
    offs = [7 * BLOCK, 3 * BLOCK, 11 * BLOCK, 9 * BLOCK]
    assert engine.batch_transfer_sync_write(
        peer.name, [addr(local, o) for o in offs], [kv + (2 + i) * BLOCK for i in range(4)],
        [BLOCK] * 4) == 0
    # batch async + get_batch_transfer_status (blocks until done, frees the batch)
    b1 = engine.batch_transfer_async_write(peer.name, [addr(local, 20 * BLOCK)],
                                           [kv + 6 * BLOCK], [BLOCK])
    b2 = engine.batch_transfer_async_write(peer.name, [addr(local, 21 * BLOCK)],
                                           [kv + 7 * BLOCK], [BLOCK])
    assert b1 > 0 and b2 > 0 and b1 != b2
    assert engine.get_batch_transfer_status([b1, b2]) == 0
    assert engine.get_batch_transfer_status([b1]) == -1  # freed: unknown now
    # submit + check (bounded poll: this API is a poll)
    b3 = engine.transfer_submit_write(peer.name, addr(local, 30 * BLOCK), kv + 8 * BLOCK, BLOCK)
    assert b3 > 0
    deadline = time.monotonic() + 30
    while (state := engine.transfer_check_status(b3)) == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert state == 1
    assert engine.transfer_check_status(b3) == -1  # freed once it reported its end

    expected = b"".join(
        local.view(np.uint8)[o:o + BLOCK].tobytes()
        for o in [0, BLOCK] + offs + [20 * BLOCK, 21 * BLOCK, 30 * BLOCK])
    got = peer.call(cmd="digest", offset=0, length=9 * BLOCK)["sha256"]
    assert got == hashlib.sha256(expected).hexdigest()


def test_every_read_family(engine, peer, local):
    src = peer.info["src_addr"]
    want = pattern(peer.info["src_seed"], peer.info["src_bytes"])
    dst = np.zeros(8 * BLOCK, dtype=np.uint8)
    assert engine.register_memory(addr(dst), dst.nbytes) == 0
    try:
        assert engine.transfer_sync_read(peer.name, addr(dst), src + 5 * BLOCK, BLOCK) == 0
        assert engine.batch_transfer_sync_read(
            peer.name, [addr(dst, BLOCK), addr(dst, 2 * BLOCK)], [src, src + 100 * BLOCK],
            [BLOCK, BLOCK]) == 0
        b = engine.batch_transfer_async_read(peer.name, [addr(dst, 3 * BLOCK)],
                                             [src + 200 * BLOCK], [2 * BLOCK])
        assert b > 0 and engine.get_batch_transfer_status([b]) == 0
        assert engine.transfer_sync(peer.name, addr(dst, 5 * BLOCK), src + 7, 100,
                                    ferry.TransferOpcode.READ) == 0
        assert (dst[:BLOCK] == want[5 * BLOCK:6 * BLOCK]).all()
        assert (dst[BLOCK:2 * BLOCK] == want[:BLOCK]).all()
        assert (dst[2 * BLOCK:3 * BLOCK] == want[100 * BLOCK:101 * BLOCK]).all()
        assert (dst[3 * BLOCK:5 * BLOCK] == want[200 * BLOCK:202 * BLOCK]).all()
        assert (dst[5 * BLOCK:5 * BLOCK + 100] == want[7:107]).all()
    finally:
        assert engine.unregister_memory(addr(dst)) == 0


def test_managed_buffers_notifies_probes_and_segments(engine, peer):
    n = 64 * 1024
    buf = engine.allocate_managed_buffer(n)
    assert buf != 0
    data = bytes(pattern(9, n))
    assert engine.write_bytes_to_buffer(buf, data, n) == 0
    assert engine.read_bytes_from_buffer(buf, n) == data
    # only a C-contiguous source is the bytes in order: a strided one is refused, not garbled
    base = np.arange(64, dtype=np.uint8)
    for strided in (base[::4], base[32:48][::-1]):
        assert engine.write_bytes_to_buffer(buf, strided, 16) == -1
        assert engine.read_bytes_from_buffer(buf, 16) == data[:16]
    assert engine.write_bytes_to_buffer(buf, np.ascontiguousarray(base[::4]), 16) == 0
    assert engine.read_bytes_from_buffer(buf, 16) == base[::4].tobytes()
    assert engine.write_bytes_to_buffer(buf, data[:16], 16) == 0
    kv = peer.info["kv_addr"]
    assert engine.transfer_sync_write(peer.name, buf, kv + 32 * BLOCK, n) == 0
    assert peer.call(cmd="digest", offset=32 * BLOCK, length=n)["sha256"] == \
        hashlib.sha256(data).hexdigest()
    assert engine.transfer_sync_read(peer.name, buf + 100, peer.info["src_addr"], 50) == 0
    assert engine.read_bytes_from_buffer(buf + 100, 50) == \
        bytes(pattern(peer.info["src_seed"], 50))
    assert engine.free_managed_buffer(buf, n) == 0
    assert engine.free_managed_buffer(buf, n) == -1  # already freed
    assert engine.read_bytes_from_buffer(buf, 10) == b""  # not engine memory any more

    # notifications both ways
    assert engine.send_notif(peer.name, ferry.TransferNotify("tag", "hello")) == 0
    assert peer.call(cmd="wait_notify")["notifies"] == [[engine.get_local_segment_name(),
                                                         "hello"]]
    peer.call(cmd="notify", target=engine.get_local_segment_name(), payload="from decode")
    got = []
    deadline = time.monotonic() + 30
    while not (got := engine.get_notifies()) and time.monotonic() < deadline:  # bounded poll
        time.sleep(0.001)
    assert [tuple(x) for x in got] == [(peer.name, "from decode")]
    name, msg = got[0]
    assert isinstance(got[0], ferry.TransferNotify) and msg == "from decode"

    assert engine.send_probe(peer.name) == 0
    assert engine.get_first_buffer_address(peer.name) == min(peer.info["kv_addr"],
                                                              peer.info["src_addr"])
    topo = json.loads(engine.get_local_topology())
    assert topo and all(k.startswith("cpu:") and len(v) == 2 for k, v in topo.items())


def test_bad_arguments_give_errors_not_crashes(engine, peer, local, caplog):
    kv = peer.info["kv_addr"]
    caplog.set_level(logging.ERROR, logger="ferry")
    # unknown segment (nobody listens there) and a malformed one
    assert engine.transfer_sync_write("127.0.0.1:1", addr(local), 0, 16) == -1
    assert engine.transfer_sync_write("no-port-here", addr(local), 0, 16) == -1
    assert engine.send_probe("127.0.0.1:1") == -1
    assert engine.get_first_buffer_address("127.0.0.1:1") == 0
    # unregistered local memory
    stray = np.ones(BLOCK, dtype=np.uint8)
    assert engine.transfer_sync_write(peer.name, addr(stray), kv, BLOCK) == -1
    # a remote range past the peer's buffer, and one nowhere near it
    assert engine.transfer_sync_write(peer.name, addr(local), kv + peer.info["kv_bytes"] - 16,
                                      BLOCK) == -1
    assert engine.transfer_sync_read(peer.name, addr(local), 4096, 16) == -1
    # a local range past the registered buffer
    assert engine.transfer_sync_write(peer.name, addr(local, local.nbytes - 16), kv, BLOCK) == -1
    # list lengths that disagree
    assert engine.batch_transfer_sync_write(peer.name, [addr(local)], [kv, kv], [16]) == -1
    assert engine.batch_transfer_async_write(peer.name, [addr(local)], [kv], []) == 0
    # freed or unknown batches
    assert engine.transfer_check_status(987654321) == -1
    assert engine.get_batch_transfer_status([987654321]) == -1
    # helpers outside registered memory, and a length past the bytes given
    assert engine.write_bytes_to_buffer(addr(stray), b"abc", 3) == -1
    assert engine.write_bytes_to_buffer(addr(local), b"abc", 10) == -1
    assert engine.read_bytes_from_buffer(addr(local, local.nbytes - 4), 8) == b""
    # registration errors
    assert engine.register_memory(addr(local, 16), 64) == -1  # overlaps `local`
    assert engine.unregister_memory(addr(stray)) == -1
    assert engine.free_managed_buffer(addr(local), 16) == -1
    assert engine.register_memory(0, 16) == -1
    # wrong types are TypeErrors (as with Mooncake's binding)
    with pytest.raises(TypeError):
        engine.register_memory("0x1000", 16)
    with pytest.raises(TypeError):
        engine.transfer_sync_write(peer.name, addr(local), kv, -1)
    with pytest.raises(TypeError):
        engine.transfer_sync_write(1234, addr(local), kv, 16)
    # every failure said why
    messages = [r.getMessage() for r in caplog.records]
    assert any("127.0.0.1:1" in m for m in messages)
    assert any("not inside memory registered" in m for m in messages)
    assert any("equally long" in m for m in messages)
    # and the engine still works
    assert engine.transfer_sync_write(peer.name, addr(local), kv, BLOCK) == 0


def test_protocol_mapping_and_bad_initialize(monkeypatch):
    from ferry import _options
    assert _options.transports_for("tcp") == (["tcp"], {})
    assert _options.transports_for("auto")[0] == ["auto"]
    monkeypatch.setenv("FERRY_RDMA_PROVIDER", "tcp;ofi_rxm")
    assert _options.transports_for("rdma", "mlx5_0") == (
        ["rdma"], {"rdma_provider": "tcp;ofi_rxm", "rdma_devices": ["mlx5_0"]})
    monkeypatch.setenv("MC_FORCE_TCP", "1")
    assert _options.transports_for("rdma") == (["tcp"], {})
    monkeypatch.delenv("MC_FORCE_TCP")
    monkeypatch.setenv("FERRY_FORCE_TCP", "true")
    assert _options.transports_for("auto") == (["tcp"], {})
    monkeypatch.delenv("FERRY_FORCE_TCP")
    assert _options.metadata_conn("10.0.0.1:2379") == "etcd://10.0.0.1:2379"
    assert _options.metadata_conn("10.0.0.1:6379", "redis") == "redis://10.0.0.1:6379"
    assert _options.metadata_conn("http://h:8080/metadata") == "http://h:8080/metadata"
    assert _options.metadata_conn("p2phandshake") == "P2PHANDSHAKE"
    e = ferry.TransferEngine()
    assert e.initialize("127.0.0.1", "P2PHANDSHAKE", "carrier-pigeon", "") == -1
    assert e.initialize("127.0.0.1:99999", "P2PHANDSHAKE", "tcp", "") == -1
    assert e.initialize("127.0.0.1", "", "tcp", "") == -1
    assert e.transfer_sync_write("x:1", 0, 0, 1) == -1  # not initialized: an error, no crash
    assert e.get_rpc_port() == -1
    # the compiled core before init: every call a clear error (the C++ engine refuses them)
    core = ferry._ferry.Engine()
    with pytest.raises(ferry.InvalidArgumentError, match="not initialized"):
        core.open("127.0.0.1:1")
    with pytest.raises(ferry.InvalidArgumentError, match="not initialized"):
        core.allocate_managed(4096)
    with pytest.raises(ferry.InvalidArgumentError, match="not initialized"):
        core.submit([(ferry._ferry.OP_WRITE, 4096, 1, 0, 16, "")])
    assert (core.rpc_port, core.name, core.completion_fd, core.notifies()) == (0, "", -1, [])


def test_blocking_calls_release_the_gil(engine, peer, local):
    kv = peer.info["kv_addr"]
    assert engine.send_probe(peer.name) == 0  # connected and cached before the peer freezes
    assert assert_releases_gil(
        peer, lambda: engine.transfer_sync_write(peer.name, addr(local), kv, 1 << 20)) == 0
    # submitted once the peer froze and before the other thread may run: only the wait counts
    assert assert_releases_gil(
        peer, lambda b: engine.get_batch_transfer_status([b]),
        prepare=lambda: engine.batch_transfer_async_write(peer.name, [addr(local)], [kv],
                                                          [BLOCK])) == 0
    assert assert_releases_gil(peer, lambda: engine.send_probe(peer.name)) == 0
    assert assert_releases_gil(
        peer, lambda: engine.transfer_sync_read(peer.name, addr(local), kv, 1 << 20)) == 0


def test_engine_objects_over_one_engine_await_together(engine, peer, local):
    """engine() gives a new ferry.Engine each call; batches of two of them awaited at once in
    one loop all complete (the completion fd has one reader per engine)."""
    kv = peer.info["kv_addr"]
    e1, e2 = engine.engine(), engine.engine()
    assert engine.send_probe(peer.name) == 0  # connected before the freeze

    async def main():
        # Both awaits are in place before anything completes: the peer is frozen meanwhile.
        peer.freeze()
        try:
            batches = [e.submit(ferry.Write(addr(local, i * BLOCK), peer.name, kv + i * BLOCK,
                                            length=BLOCK))
                       for i, e in enumerate([e1, e2, e1, e2])]
            waits = [asyncio.ensure_future(_awaited(b)) for b in batches]
            await asyncio.sleep(0)  # each wait registers its future and the fd reader
        finally:
            peer.thaw()
        results = await asyncio.wait_for(asyncio.gather(*waits), 15)
        for b in batches:
            b.free()
        return results

    assert [r.state for r in asyncio.run(main())] == ["COMPLETED"] * 4
    assert peer.call(cmd="digest", offset=0, length=4 * BLOCK)["sha256"] == \
        digest(local, 0, 4 * BLOCK)


async def _awaited(batch):
    return await batch
