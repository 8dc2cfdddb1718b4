"""Ray at the edges. ``--address HOST:PORT`` is checked with a bounded HTTP/2 handshake before anything is written: a
port where nothing listens, or where something that is not a gRPC server (Ray's GCS) listens — silent, or answering in
another protocol — is exit 2 in seconds, where ``ray.init`` retried for minutes after the store and a run row were
written. And the processes an embedded Ray starts die with a driver killed by SIGKILL, not minutes later."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.core.errors import UserError
from harness.run.ray_executor import HANDSHAKE_S, check_address
from tests.conftest import REPO_ROOT, CliResult

#: An HTTP/2 server's first frame: an empty SETTINGS frame (length 0, type 4, no flags, stream 0).
SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


@pytest.fixture
def server() -> Iterator[Callable[[bytes | None], str]]:
    """``server(reply)``: a listener on a free loopback port that answers every connection with ``reply`` after
    reading the client's first bytes (None: reads and never answers); returns its HOST:PORT."""
    listeners: list[socket.socket] = []
    stop = threading.Event()

    def start(reply: bytes | None) -> str:
        sock = socket.create_server(("127.0.0.1", 0))
        sock.settimeout(0.2)
        listeners.append(sock)

        def serve() -> None:
            while not stop.is_set():
                try:
                    conn, _ = sock.accept()
                except OSError:
                    continue
                with conn:
                    conn.recv(64)
                    if reply is not None:
                        conn.sendall(reply)
                    stop.wait(2 * HANDSHAKE_S)  # hold the connection open, silent

        threading.Thread(target=serve, daemon=True).start()
        return f"127.0.0.1:{sock.getsockname()[1]}"

    yield start
    stop.set()
    for sock in listeners:
        sock.close()


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return sock.getsockname()[1]


@pytest.mark.parametrize(("reply", "message"), [
    (None, "does not answer as a Ray cluster (no reply in 1 s)"),
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "not a gRPC server: it replied b'HTTP/1.1 "),
    (b"SSH-2.0-OpenSSH_9.6\r\n", "not a Ray cluster"),
])
def test_something_that_is_not_ray_is_refused_within_the_handshake_time(
        server: Callable[[bytes | None], str], reply: bytes | None, message: str) -> None:
    address = server(reply)
    started = time.perf_counter()
    with pytest.raises(UserError, match="ray start --head") as exc:
        check_address(address)
    assert message in str(exc.value) and f"--address {address}" in str(exc.value)
    assert time.perf_counter() - started < HANDSHAKE_S + 2


def test_a_port_where_nothing_listens_is_refused() -> None:
    with pytest.raises(UserError, match="nothing answers there"):
        check_address(f"127.0.0.1:{_closed_port()}")


def test_an_http2_server_passes(server: Callable[[bytes | None], str]) -> None:
    check_address(server(SETTINGS))  # what Ray's GCS (gRPC) answers; a real one is checked in the Ray tests


def test_auto_and_client_addresses_are_checked_before_anything_is_written() -> None:
    """``auto`` where no cluster runs, and a Ray Client address where nothing answers (or without Ray's client extra),
    are one line each, not minutes of ray.init retrying after the store exists."""
    pytest.importorskip("ray")
    for address in ("auto", "ray://head.invalid:10001"):
        with pytest.raises(UserError, match=f"--address {address}"):
            check_address(address)


def test_run_with_a_silent_address_writes_nothing(cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path,
                                                  server: Callable[[bytes | None], str]) -> None:
    pytest.importorskip("ray")
    address = server(None)
    started = time.perf_counter()
    result = cli("run", tiny_suite, "--out", tmp_path / "out", "--executor", "ray", "--address", address)
    assert result.code == 2 and len(result.err_lines) == 1, result.err
    assert "does not answer as a Ray cluster" in result.err
    assert not (tmp_path / "out").exists()  # no store, no run row
    assert time.perf_counter() - started < 30  # generous for a busy machine; ray.init retried for over 150 s


#: A driver that starts a child (as ray.init starts the GCS, raylet and agents), then the watchdog, and waits.
_DRIVER = """
import subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from harness.run import ray_executor
child = subprocess.Popen(["sleep", "120"], stdout=subprocess.DEVNULL)
ray_executor._start_watchdog()
print(child.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, waiting for init to reap it
    except OSError:
        return False


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="the watchdog reads /proc (Linux)")
def test_what_embedded_ray_started_dies_with_a_killed_driver() -> None:
    driver = subprocess.Popen([sys.executable, "-c", _DRIVER, str(REPO_ROOT)], stdout=subprocess.PIPE, text=True)
    child = int(driver.stdout.readline())
    assert _alive(child)
    driver.send_signal(signal.SIGKILL)  # no handler runs: only the watchdog can clean up
    driver.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the driver's child outlived it"
