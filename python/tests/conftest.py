"""Fixtures: one "decode" peer process (peer.py) for the whole run, driven over JSON lines."""

import json
import os
import selectors
import signal
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


class Peer:
    """A peer.py process; every exchange with it is bounded."""

    def __init__(self, protocol="tcp"):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "peer.py"), protocol],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=os.environ.copy())
        self._buf = b""
        self.info = self._read(timeout=60)
        self.name = self.info["name"]
        self.pid = self.info["pid"]

    def _read(self, timeout):
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        try:
            while b"\n" not in self._buf:
                if not sel.select(timeout):
                    raise TimeoutError(f"peer gave no answer within {timeout} s")
                chunk = os.read(self.proc.stdout.fileno(), 65536)
                if not chunk:
                    raise RuntimeError(f"peer exited (status {self.proc.poll()})")
                self._buf += chunk
        finally:
            sel.close()
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def call(self, timeout=30, **cmd):
        self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
        self.proc.stdin.flush()
        reply = self._read(timeout)
        assert "error" not in reply, reply
        return reply

    def freeze(self):
        """SIGSTOP, returning once every thread of the peer stopped (waitpid reports it)."""
        os.kill(self.pid, signal.SIGSTOP)
        _, status = os.waitpid(self.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status), f"peer did not stop (status {status})"

    def thaw(self):
        os.kill(self.pid, signal.SIGCONT)

    def stop(self):
        try:
            self.thaw()
            self.call(cmd="exit", timeout=10)
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture(scope="session")
def peer():
    p = Peer("tcp")
    yield p
    p.stop()


def assert_releases_gil(peer, call, prepare=None):
    """Runs ``call()`` (which must block until the frozen ``peer`` is thawed) while a second
    thread waits to run: that thread thaws the peer, so the call can only end early if the
    thread got to run during it, i.e. if the call released the GIL. Returns call()'s result.

    ``prepare`` (optional) runs once the peer is frozen and before the thread may run, and its
    result is call()'s argument: so ``prepare=submit, call=lambda b: b.wait()`` checks the wait
    alone (a submit that released the GIL cannot pass for it).

    A call that kept the GIL would block until its own deadline (the thread cannot run), and the
    thread's event would not be set when it returns. The switch interval is raised meanwhile so
    that the interpreter never hands the GIL over on its own before the call starts."""
    import threading

    ran = threading.Event()
    go = threading.Event()

    def other():
        go.wait()
        ran.set()
        peer.thaw()

    t = threading.Thread(target=other)
    old = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    t.start()
    peer.freeze()
    try:
        if prepare is not None:
            prepared = prepare()
        go.set()
        result = call(prepared) if prepare is not None else call()
        ran_during_call = ran.is_set()
    finally:
        sys.setswitchinterval(old)
        peer.thaw()
        t.join(timeout=30)
    assert ran_during_call, "the other thread could not run during the call: GIL held"
    return result
