"""Embedders: the local one loads from the wheel with no network; the remote one batches."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator

import pytest

from gateway.knowledge.embed import (
    BATCH,
    EmbeddingError,
    LocalEmbedder,
    RemoteEmbedder,
    embeddings_url,
)
from testsupport.fakes.embeddings import FakeEmbeddings


@pytest.fixture
async def fake() -> AsyncIterator[FakeEmbeddings]:
    server = await FakeEmbeddings().start()
    try:
        yield server
    finally:
        await server.stop()


def test_the_local_embedder_loads_with_no_network_at_all() -> None:
    # every socket connect fails in the child: a download attempt would raise
    script = textwrap.dedent(
        """
        import os, socket
        os.environ["HF_HUB_OFFLINE"] = "1"
        def refuse(*a, **k):
            raise OSError("network is off in this test")
        socket.socket.connect = refuse
        socket.create_connection = refuse
        from gateway.knowledge.embed import LocalEmbedder
        vectors = LocalEmbedder().embed_sync(["refund policy", "holiday leave"])
        print(len(vectors), len(vectors[0]))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1].split() == ["2", "256"]


async def test_local_vectors_are_unit_length_and_meaningful() -> None:
    embedder = LocalEmbedder()
    assert await embedder.dimension() == 256
    a, b, c = await embedder.embed(
        ["how do I reset my password", "password reset instructions", "the weather is sunny"]
    )
    assert math.isclose(sum(x * x for x in a), 1.0, rel_tol=1e-4)

    def cos(u: list[float], v: list[float]) -> float:
        return sum(x * y for x, y in zip(u, v, strict=True))

    assert cos(a, b) > cos(a, c) + 0.3
    assert await embedder.embed([]) == []


def test_embeddings_url_accepts_the_usual_spellings() -> None:
    assert embeddings_url("http://h/v1") == "http://h/v1/embeddings"
    assert embeddings_url("http://h/v1/") == "http://h/v1/embeddings"
    assert embeddings_url("http://h") == "http://h/v1/embeddings"
    assert embeddings_url("http://h/v1/embeddings") == "http://h/v1/embeddings"


async def test_remote_embedder_batches_and_keeps_order(fake: FakeEmbeddings) -> None:
    embedder = RemoteEmbedder(fake.url, model="fake-embed", api_key="sk-test")
    try:
        texts = [f"text number {i}" for i in range(BATCH + 6)]
        vectors = await embedder.embed(texts)
        assert len(vectors) == len(texts)
        assert [len(r["body"]["input"]) for r in fake.requests] == [BATCH, 6]
        assert fake.requests[0]["body"]["model"] == "fake-embed"
        assert fake.requests[0]["auth"] == "Bearer sk-test"
        # order follows ``index``, not the order the server listed them in
        again = await embedder.embed([texts[5]])
        assert vectors[5] == again[0]
        assert await embedder.dimension() == fake.dim
    finally:
        await embedder.aclose()


async def test_remote_embedder_errors_say_whether_to_retry(fake: FakeEmbeddings) -> None:
    embedder = RemoteEmbedder(fake.url, model="m")
    try:
        fake.fail_status = 503
        with pytest.raises(EmbeddingError, match="503") as exc:
            await embedder.embed(["x"])
        assert exc.value.transient
        fake.fail_status = 400
        with pytest.raises(EmbeddingError) as exc:
            await embedder.embed(["x"])
        assert not exc.value.transient
    finally:
        await embedder.aclose()
    gone = RemoteEmbedder("http://127.0.0.1:9/v1", model="m")
    try:
        with pytest.raises(EmbeddingError, match="unreachable") as exc:
            await gone.embed(["x"])
        assert exc.value.transient
    finally:
        await gone.aclose()
