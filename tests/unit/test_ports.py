"""``profiler.ports.free_port``: a port that binds now and that the kernel does not hand
out as a source port (below its ephemeral range), else the one the OS picks."""

from __future__ import annotations

import socket

from profiler import ports


def test_a_free_port_is_below_the_ephemeral_range_and_binds():
    low = ports._ephemeral_low()
    for _ in range(20):
        port = ports.free_port()
        assert ports.LOWEST_PORT <= port < low, (port, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_in_use_is_not_given(monkeypatch, tmp_path):
    range_file = tmp_path / "range"
    range_file.write_text("40000 60999")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        draws = iter([busy, busy, 20_000])
        monkeypatch.setattr(ports._RANDOM, "randint", lambda a, b: next(draws))
        assert ports.free_port(range_file=range_file) == 20_000


def test_no_room_below_the_range_falls_back_to_the_os(tmp_path):
    narrow = tmp_path / "range"
    narrow.write_text("1024\t65535\n")  # everything is ephemeral
    port = ports.free_port(range_file=narrow)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
    unreadable = tmp_path / "missing"
    assert ports._ephemeral_low(unreadable) == 32768

