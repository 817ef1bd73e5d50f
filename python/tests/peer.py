"""The "decode" process of the Python tests (and a peer for every call family): a ferry.Engine
with a registered KV-cache tensor and a patterned source buffer, driven by JSON lines on stdin,
answering JSON lines on stdout.

Started as: python3 peer.py <protocol>. First line out: {"name", "pid", "kv_addr", "kv_bytes",
"kv_shape", "src_addr", "src_bytes", "src_seed"}.
"""

import hashlib
import json
import sys
import time

import numpy as np
import torch

import ferry

KV_SHAPE = (8, 64, 8, 128)  # layers x blocks x heads x head_dim, fp16: 1 MiB
SRC_BYTES = 1 << 20
SRC_SEED = 11


def kv_tensor(seed):
    """The KV cache the prefill side writes for ``seed`` (both sides build it the same way)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(KV_SHAPE, generator=g, dtype=torch.float32).to(torch.float16)


def pattern(seed, n):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def main():
    protocol = sys.argv[1] if len(sys.argv) > 1 else "tcp"
    engine = ferry.Engine(host="127.0.0.1", transports=[protocol])
    kv = torch.zeros(KV_SHAPE, dtype=torch.float16)
    src = pattern(SRC_SEED, SRC_BYTES)
    regs = {"kv": engine.register(kv), "src": engine.register(src)}

    def reply(**fields):
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()

    reply(name=engine.name, pid=__import__("os").getpid(), kv_addr=kv.data_ptr(),
          kv_bytes=kv.numel() * kv.element_size(), kv_shape=list(KV_SHAPE),
          src_addr=int(src.ctypes.data), src_bytes=SRC_BYTES, src_seed=SRC_SEED)
    kv_bytes = kv.view(torch.uint8).view(-1).numpy()  # a byte view of the same memory
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["cmd"]
        if op == "wait_notify":
            # Bounded poll: notifications have no blocking call.
            deadline = time.monotonic() + cmd.get("timeout", 10)
            got = []
            while not got and time.monotonic() < deadline:
                got = engine.notifies()
                if not got:
                    time.sleep(0.002)
            reply(notifies=[[n.name, n.payload.decode("utf-8", "replace")] for n in got])
        elif op == "verify_kv":
            expected = kv_tensor(cmd["seed"])
            diff = int((kv.view(torch.int16) != expected.view(torch.int16)).sum())
            reply(ok=diff == 0, mismatched_elements=diff)
        elif op == "digest":
            o, n = cmd["offset"], cmd["length"]
            reply(sha256=hashlib.sha256(kv_bytes[o:o + n].tobytes()).hexdigest())
        elif op == "zero":
            kv.zero_()
            reply(ok=True)
        elif op == "reregister":
            regs["kv"].close()
            regs["kv"] = engine.register(kv)
            reply(ok=True)
        elif op == "notify":
            engine.notify(cmd["target"], cmd["payload"].encode())
            reply(ok=True)
        elif op == "exit":
            reply(ok=True)
            return
        else:
            reply(error=f"unknown command {op!r}")


if __name__ == "__main__":
    main()
