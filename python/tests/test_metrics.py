"""Engine.get_metrics() (and the Mooncake-style TransferEngine.get_metrics()) between two
engines in this process over tcp, and the Prometheus endpoint the metrics_port option opens."""

import urllib.request

import numpy as np

import ferry
from ferry.mooncake import TransferEngine


def test_metrics_dict_counts_a_transfer_and_the_endpoint_serves_it():
    with ferry.Engine(transports=["tcp"], metrics_port=0) as a, \
            ferry.Engine(transports=["tcp"]) as b:
        assert a.get_metrics()["transfers"] == []
        src = np.full(1 << 16, 7, dtype=np.uint8)
        dst = np.zeros(1 << 16, dtype=np.uint8)
        with a.register(src), b.register(dst) as target:
            a.write(b.name, src, target.addr)
        m = a.get_metrics()
        assert m["segment"] == a.name
        (series,) = [t for t in m["transfers"] if t["peer"] == b.name]
        assert series["transport"] == "tcp"
        assert series["bytes_written"] == 1 << 16 and series["bytes_read"] == 0
        assert series["completed"] == 1 and series["failed"] == {}
        assert series["in_flight"] == 0 and series["latency"]["count"] == 1
        (tcp,) = [t for t in m["transports"] if t["name"] == "tcp"]
        assert tcp["registrations"] == 1 and tcp["registered_bytes"] == 1 << 16
        assert tcp["counters"]["connections_opened"] >= 1
        assert m["metadata"]["store"] == "p2p" and m["metadata"]["ops"]["get"]["count"] >= 1
        assert set(m["notifications"]) == {"sent", "send_failures", "received", "refused"}

        assert b.metrics_port == 0  # off unless asked for
        url = f"http://127.0.0.1:{a.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            text = reply.read().decode()
        lines = [line for line in text.splitlines()
                 if line.startswith("ferry_transfer_bytes_total{") and f'peer="{b.name}"' in line
                 and 'op="write"' in line]
        assert len(lines) == 1 and float(lines[0].rsplit(" ", 1)[1]) == 1 << 16


def test_mooncake_get_metrics():
    engine = TransferEngine()
    assert engine.get_metrics() == {}
    assert engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    m = engine.get_metrics()
    assert m["segment"] == engine.get_local_segment_name()
    assert [t["name"] for t in m["transports"]] == ["tcp"]
