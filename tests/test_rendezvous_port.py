"""The job's rendezvous port (MASTER_PORT) is drawn below the kernel's ephemeral range: a port from that range
was once taken between dlrun's choice and rank 0's listen (EADDRINUSE on rank 0, the other rank waiting on its own
connection until the test's limit)."""
from __future__ import annotations

import socket

from dlrun.execute import stage


def _ephemeral() -> tuple[int, int]:
    low, high = stage.EPHEMERAL_RANGE.read_text().split()
    return int(low), int(high)


def test_the_port_is_free_and_below_the_ephemeral_range():
    low, _ = _ephemeral()
    ports = {stage.free_port() for _ in range(20)}
    assert all(stage.RENDEZVOUS_PORTS[0] <= port < low for port in ports) and len(ports) > 1
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("", port))  # free: rank 0 can listen on it


def test_a_port_in_use_is_never_chosen(monkeypatch):
    taken = next(port for port in range(21000, 32000, 7) if stage._bindable(port) and stage._bindable(port + 1))
    with socket.socket() as held:
        held.bind(("", taken))
        held.listen()
        monkeypatch.setattr(stage, "RENDEZVOUS_PORTS", (taken, taken + 1))
        monkeypatch.setattr(stage, "_ephemeral_low", lambda: 65536)
        assert {stage.free_port() for _ in range(30)} == {taken + 1}


def test_a_kernel_without_room_below_its_range_gets_a_kernel_chosen_port(monkeypatch):
    monkeypatch.setattr(stage, "_ephemeral_low", lambda: 1024)
    port = stage.free_port()
    assert 1024 <= port <= 65535
