"""A refusal the server sends before reading the body (413 over GATEWAY_MAX_BODY_BYTES) reaches
an ordinary HTTP client, also when the connection closes after it: the server lingers,
reading and dropping the rest of the body, instead of closing while the client still sends
(which the kernel answers with a reset that loses the 413)."""

from __future__ import annotations

import asyncio
import http.client
from collections import Counter

import httpx

from gateway.http import linger
from testsupport.harness import running_gateway

POST = "/web/api/channels/general/messages"
TRIES = 50


def _post_many(port: int, size: int, *, close: bool) -> Counter[str]:
    """``TRIES`` posts of ``size`` bytes with http.client (a new connection each); what each
    ended with: a status code, or the name of the error."""
    body = b"x" * size
    headers = {"Content-Type": "application/json"}
    if close:
        headers["Connection"] = "close"
    seen: Counter[str] = Counter()
    for _ in range(TRIES):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("POST", POST, body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            seen[str(response.status)] += 1
        except OSError as exc:
            seen[type(exc).__name__] += 1
        finally:
            conn.close()
    return seen


async def test_a_413_reaches_the_client_every_time(database_url: str) -> None:
    async with running_gateway(database_url) as gw:
        port = gw.http.port
        assert gw.settings.gateway_max_body_bytes == 1_048_576
        for size in (2_000_000, 20_000_000):
            # Connection: close is where the abrupt close lost the answer (a reset); the
            # keep-alive case is checked too
            closing = await asyncio.to_thread(_post_many, port, size, close=True)
            print(f"{size} bytes, Connection: close: {dict(closing)}")
            assert closing == Counter({"413": TRIES})
        kept = await asyncio.to_thread(_post_many, port, 2_000_000, close=False)
        assert kept == Counter({"413": TRIES})
        # httpx too, one client, the connection kept between tries
        async with httpx.AsyncClient(base_url=gw.url, timeout=30) as client:
            for _ in range(5):
                answer = await client.post(
                    POST, content=b"x" * 2_000_000, headers={"Content-Type": "application/json"}
                )
                assert answer.status_code == 413
                assert answer.json()["title"] == "Request too large"


async def test_a_client_that_never_stops_sending_is_cut_off(database_url: str) -> None:
    """The lingering is bounded: past LINGER_BYTES the connection is closed the old way."""
    async with running_gateway(database_url) as gw:
        reader, writer = await asyncio.open_connection("127.0.0.1", gw.http.port)
        writer.write(
            b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n"
            % (POST.encode(), 10 * linger.LINGER_BYTES)
        )
        # the 413 comes at once, from the headers: read it while sending
        answer = asyncio.create_task(reader.read(65536))
        sent = 0
        chunk = b"x" * 1_048_576
        cut_off = False
        try:
            while sent < 4 * linger.LINGER_BYTES:
                writer.write(chunk)
                await writer.drain()
                sent += len(chunk)
        except OSError:
            cut_off = True  # what a client sending forever gets
        writer.close()
        head = await answer
        assert head.startswith(b"HTTP/1.1 413"), head[:100]
        assert cut_off, f"still reading after {sent} bytes"
        assert sent <= 2 * linger.LINGER_BYTES
