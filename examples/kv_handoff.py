#!/usr/bin/env python3
"""KV-cache hand-off between a "prefill" and a "decode" process with ferry's Python module.

Decode registers an empty KV cache (layers x blocks x heads x head_dim, fp16) and publishes it;
prefill computes its KV cache, writes it into decode's with the Mooncake-compatible API (one
batch per layer; the last carries a notification), and decode, once notified, verifies every
element against what prefill should have sent.

    # one command: prefill here, decode spawned as a child
    PYTHONPATH=build/python python3 examples/kv_handoff.py
    # or two (e.g. two hosts; --host is the address peers reach each process at):
    PYTHONPATH=build/python python3 examples/kv_handoff.py --role decode --host 10.0.0.2
    PYTHONPATH=build/python python3 examples/kv_handoff.py --role prefill --host 10.0.0.1 \
        --peer 10.0.0.2:<port> --peer-addr <addr printed by decode>

--protocol tcp|shm|rdma|auto (default tcp), --metadata P2PHANDSHAKE (default) or a store.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import torch

from ferry import Engine, TransferEngine, TransferNotify

SHAPE = (16, 64, 8, 128)  # layers x blocks x heads x head_dim: 2 MiB of fp16
SEED = 2024


def expected_kv():
    g = torch.Generator().manual_seed(SEED)
    return torch.randn(SHAPE, generator=g).to(torch.float16)


def decode(args):
    engine = Engine(host=args.host, metadata=args.metadata, transports=args.protocol.split(","))
    kv = torch.zeros(SHAPE, dtype=torch.float16)
    with engine.register(kv):
        print(json.dumps({"segment": engine.name, "addr": kv.data_ptr()}), flush=True)
        deadline = time.monotonic() + args.timeout
        notes = []
        while not notes and time.monotonic() < deadline:  # notifications have no blocking call
            notes = engine.notifies()
            time.sleep(0.001)
        if not notes:
            print("decode: no notification within the timeout", file=sys.stderr)
            return 1
        wrong = int((kv.view(torch.int16) != expected_kv().view(torch.int16)).sum())
        print(f"decode: notified by {notes[0].name} ({notes[0].payload.decode()!r}); "
              f"{kv.numel()} fp16 elements of shape {tuple(SHAPE)} checked, {wrong} wrong",
              file=sys.stderr)
        return 0 if wrong == 0 else 1


def prefill(args, peer, peer_addr):
    engine = TransferEngine()  # the Mooncake-compatible API: the calls vLLM / SGLang make
    if engine.initialize(args.host, args.metadata, args.protocol, "") != 0:
        return 1
    kv = expected_kv()
    nbytes = kv.numel() * kv.element_size()
    if engine.register_memory(kv.data_ptr(), nbytes) != 0:
        return 1
    per_layer = nbytes // SHAPE[0]
    start = time.monotonic()
    for layer in range(SHAPE[0]):
        last = layer == SHAPE[0] - 1
        rc = engine.transfer_sync_write(peer, kv.data_ptr() + layer * per_layer,
                                        peer_addr + layer * per_layer, per_layer,
                                        TransferNotify("kv", "kv ready") if last else None)
        if rc != 0:
            print(f"prefill: layer {layer} failed", file=sys.stderr)
            return 1
    took = time.monotonic() - start
    print(f"prefill: wrote {SHAPE[0]} layers ({nbytes} bytes) to {peer} over {args.protocol} "
          f"in {took * 1000:.1f} ms and notified", flush=True)
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--role", choices=["both", "prefill", "decode"], default="both")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--protocol", default="tcp")
    p.add_argument("--metadata", default="P2PHANDSHAKE")
    p.add_argument("--peer", help="decode's segment name (--role prefill)")
    p.add_argument("--peer-addr", type=lambda s: int(s, 0), help="decode's KV address")
    p.add_argument("--timeout", type=float, default=60)
    args = p.parse_args()
    if args.role == "decode":
        return decode(args)
    if args.role == "prefill":
        return prefill(args, args.peer, args.peer_addr)
    child = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--role", "decode", "--host", args.host,
         "--protocol", args.protocol, "--metadata", args.metadata,
         "--timeout", str(args.timeout)], stdout=subprocess.PIPE, text=True)
    info = json.loads(child.stdout.readline())
    rc = prefill(args, info["segment"], info["addr"])
    try:
        child_rc = child.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child_rc = 1
    ok = rc == 0 and child_rc == 0
    print("kv_handoff: " + ("OK, every byte verified by decode" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
