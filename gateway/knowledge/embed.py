"""Embedders: an OpenAI-compatible ``/v1/embeddings`` server when ``EMBEDDING_BASE_URL`` is
set (batched), otherwise the built-in local embedder.

The local one is WordLlama's ``l2_supercat`` at 256 dimensions: its weights and tokenizer ship
inside the ``wordllama`` wheel, so it needs no download at run time. It is loaded from those
files directly, because ``WordLlama.load`` looks for the tokenizer in a folder the wheel does
not have and then tries Hugging Face (which fails offline)."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

import httpx
import structlog

log = structlog.get_logger(__name__)

LOCAL_MODEL = "wordllama/l2_supercat_256"
LOCAL_DIM = 256
#: texts per request to an embeddings server
BATCH = 64


class EmbeddingError(Exception):
    """The embedder could not embed; ``transient`` says whether a later try may succeed."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


class Embedder(Protocol):
    #: the model name stored with each knowledge base
    model: str

    async def dimension(self) -> int:
        """The vectors' length (may ask the server once)."""
        ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-length vector per text, in order."""
        ...

    async def aclose(self) -> None: ...


def _normalize(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [float(x) / norm for x in vector] if norm > 0 else [0.0 for _ in vector]


class LocalEmbedder:
    """WordLlama from the wheel's own files; loaded once, on first use, off the event loop."""

    model = LOCAL_MODEL

    def __init__(self) -> None:
        self._inference: Any = None
        self._lock = threading.Lock()
        self.load_seconds: float | None = None

    def _load(self) -> Any:
        with self._lock:
            if self._inference is None:
                started = time.perf_counter()
                from importlib import resources

                from safetensors import safe_open
                from tokenizers import Tokenizer
                from wordllama.inference import WordLlamaInference

                root = resources.files("wordllama")
                tokenizer = Tokenizer.from_file(
                    str(root / "tokenizers" / "l2_supercat_tokenizer_config.json")
                )
                weights = str(root / "weights" / "l2_supercat_256.safetensors")
                with safe_open(weights, framework="np", device="cpu") as f:
                    matrix = f.get_tensor("embedding.weight")
                self._inference = WordLlamaInference(matrix, tokenizer)
                self.load_seconds = time.perf_counter() - started
                log.info("local_embedder_loaded", seconds=round(self.load_seconds, 3))
            return self._inference

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        if not texts:
            return []
        vectors = self._load().embed(list(texts))
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        result: list[list[float]] = (vectors / norms).astype(float).tolist()
        return result

    async def dimension(self) -> int:
        return LOCAL_DIM

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_sync, texts)

    async def aclose(self) -> None:
        return None


def embeddings_url(base_url: str) -> str:
    """``EMBEDDING_BASE_URL`` as people write it (``https://host/v1``, ``https://host``, or
    the full ``.../v1/embeddings``) to the endpoint."""
    base = base_url.rstrip("/")
    if base.endswith("/embeddings"):
        return base
    if base.endswith("/v1"):
        return base + "/embeddings"
    return base + "/v1/embeddings"


class RemoteEmbedder:
    """An OpenAI-compatible ``/v1/embeddings`` server, ``BATCH`` texts per request."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.model = model
        self.url = embeddings_url(base_url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.AsyncClient(timeout=timeout, headers=headers)
        self._dim: int | None = None

    async def dimension(self) -> int:
        if self._dim is None:
            self._dim = len((await self.embed(["dimension probe"]))[0])
        return self._dim

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            out.extend(await self._batch(list(texts[start : start + BATCH])))
        return out

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        try:
            response = await self._client.post(self.url, json={"model": self.model, "input": texts})
        except httpx.HTTPError as exc:
            raise EmbeddingError(f"embedding server unreachable: {exc}", transient=True) from exc
        if response.status_code != 200:
            transient = response.status_code == 429 or response.status_code >= 500
            raise EmbeddingError(
                f"embedding server answered {response.status_code}: {response.text[:200]}",
                transient=transient,
            )
        try:
            items = sorted(response.json()["data"], key=lambda d: d["index"])
            vectors = [_normalize(item["embedding"]) for item in items]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(
                f"embedding server sent a bad answer: {exc}", transient=False
            ) from exc
        if len(vectors) != len(texts):
            raise EmbeddingError(
                f"embedding server returned {len(vectors)} vectors for {len(texts)} texts",
                transient=False,
            )
        dims = {len(v) for v in vectors}
        if len(dims) != 1 or (self._dim is not None and dims != {self._dim}):
            raise EmbeddingError(f"embedding dimensions changed: {sorted(dims)}", transient=False)
        self._dim = dims.pop()
        return vectors

    async def aclose(self) -> None:
        await self._client.aclose()
