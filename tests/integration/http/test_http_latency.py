"""Regression: keep-alive responses waited ~40 ms each for the client's delayed ACK, because
the listening socket was created without proto=IPPROTO_TCP and asyncio therefore left Nagle
on for accepted connections (uvicorn writes headers and body separately)."""

from __future__ import annotations

import asyncio
import socket
import time

from testsupport.harness import running_gateway


def _keep_alive_round_trips(port: int, n: int) -> list[float]:
    times = []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(n):
            started = time.perf_counter()
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            received = b""
            while not received.endswith(b'{"status":"ok"}'):
                chunk = conn.recv(4096)
                assert chunk, "connection closed"
                received += chunk
            times.append(time.perf_counter() - started)
    return times


async def test_keep_alive_responses_are_not_held_back_by_nagle(database_url: str) -> None:
    async with running_gateway(database_url) as gw:
        times = await asyncio.to_thread(_keep_alive_round_trips, gw.http.port, 8)
    # with Nagle on, every response after the first took >= 40 ms; the fastest of several
    # is a robust signal even on a busy machine
    assert min(times[1:]) < 0.02, [round(t * 1000, 1) for t in times]
