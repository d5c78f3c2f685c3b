"""The knowledge base: the local embedder's load time and speed, ingest throughput
(pages per second, PDF and Markdown, parse + chunk + embed + store), retrieval latency at
10,000 and 100,000 passages (p50/p99, the SQL alone and with the query's embedding), and
recall@5 on a question set written from the project's spec (``kb_corpus/``): full text alone,
the local embedder alone, and both fused."""

from __future__ import annotations

import random
import re
import sys
import time
from importlib import resources
from typing import Any

import asyncpg

from benchmarks.common import Server, scratch_database
from benchmarks.kb_citations import citation_figures, citation_markdown
from gateway.knowledge.config import KnowledgeSettings
from gateway.knowledge.embed import LocalEmbedder
from gateway.knowledge.service import Knowledge
from session_store.repos.knowledge import KnowledgeStore, NewChunk
from session_store.store import Store

#: (question, a phrase the passage that answers it contains), paraphrased so that the words
#: of the question are often not the words of the answer
QUESTIONS: list[tuple[str, str]] = [
    ("What id does Telegram's General forum topic have?", "General's id is 1"),
    ("Do posts in the General topic come with a thread identifier?", "arrive without"),
    ("How many messages per minute can a bot send into one group?", "20 messages per minute"),
    ("Which header carries the secret of a Telegram webhook?", "Secret-Token"),
    ("What error does a second poller with the same bot token get?", "409 Conflict"),
    ("How is the signature of a Slack request computed?", "HMAC-SHA256"),
    ("How fast must a Slack app acknowledge an event before Slack retries?", "3 seconds"),
    ("At what length does Slack cut very long message text?", "40,000"),
    ("What is the longest Mattermost post in runes?", "16383"),
    ("How can a retried Mattermost post avoid being created twice?", "pending_post_id"),
    ("Does a Mattermost server limit request rates by default?", "Off by default"),
    ("What is the maximum size of a Telegram text message?", "4096"),
    ("Which variable points the gateway at an external database server?", "PostgreSQL DSN"),
    ("How are replicas starting together kept from migrating at once?", "advisory lock"),
    ("How many messages per second did a plain asyncpg transaction reach?", "700 msg/s"),
    ("Why not fold the append and the last-50 read into one statement?", "stale contexts"),
    ("What must never change about what an answer cites?", "Citations are frozen"),
    ("Which kinds of ingress run on a single leader?", "Single-connection ingress"),
    ("What exit status does a bad setting produce?", "2 bad configuration"),
    ("Which post is the root when answering a Mattermost reply?", "root_id or post.id"),
    ("What do Socket Mode envelopes carry when Slack retries?", "retry_attempt"),
    ("What is the default limit on fetched attachment size?", "20971520"),
    ("Where does the gateway keep data when no database URL is set?", "embedded PostgreSQL"),
    ("How should a bot reply into General without errors?", "omit `message_thread_id`"),
]


def corpus() -> dict[str, str]:
    root = resources.files("benchmarks") / "kb_corpus"
    return {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in root.iterdir()
        if entry.name.endswith(".md") and entry.name != "SOURCES.md"
    }


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def make_pdf(pages: list[str]) -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=11)
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text.encode("latin-1", "replace").decode("latin-1"))
    return bytes(pdf.output())


async def embedder_figures(
    embedder: LocalEmbedder, words: list[str], chunks: int = 1000
) -> dict[str, float]:
    started = time.perf_counter()
    embedder.embed_sync(["warm up"])
    load = embedder.load_seconds or (time.perf_counter() - started)
    rng = random.Random(1)
    texts = [" ".join(rng.choices(words, k=380)) for _ in range(chunks)]  # ~512-token chunks
    started = time.perf_counter()
    embedder.embed_sync(texts)
    chunk_rate = len(texts) / (time.perf_counter() - started)
    queries = [" ".join(rng.choices(words, k=10)) for _ in range(200)]
    times = []
    for query in queries:
        t = time.perf_counter()
        embedder.embed_sync([query])
        times.append((time.perf_counter() - t) * 1000)
    return {
        "load_s": round(load, 3),
        "chunks_per_s": round(chunk_rate, 1),
        "query_ms_p50": round(_pct(times, 0.5), 3),
        "query_ms_p99": round(_pct(times, 0.99), 3),
    }


async def ingest_figures(
    dsn: str, embedder: LocalEmbedder, text: str, pages: int
) -> dict[str, Any]:
    words = text.split()
    page_texts = [" ".join(words[(i * 350) % len(words) :][:350]) for i in range(pages)]
    pdf = make_pdf(page_texts)
    md = "\n\n".join(f"## Page {i + 1}\n\n{t}" for i, t in enumerate(page_texts)).encode()
    out: dict[str, Any] = {"pages": pages}
    store = await Store.connect(dsn, min_size=1, max_size=4)
    try:
        k = Knowledge(KnowledgeStore(store.db), embedder, KnowledgeSettings())
        for kind, name, data in (("pdf", "bench.pdf", pdf), ("markdown", "bench.md", md)):
            started = time.perf_counter()
            added = await k.add(name, data, kb=f"ingest-{kind}")
            while await k.process_one():
                pass
            seconds = time.perf_counter() - started
            doc = await k.store.get_document(added.document.id)
            assert doc is not None and doc.state == "ready", doc
            out[kind] = {
                "pages_per_s": round(pages / seconds, 1),
                "seconds": round(seconds, 2),
                "passages": doc.chunk_count,
            }
            print(f"  ingest {kind}: {pages / seconds:.1f} pages/s", file=sys.stderr)
    finally:
        await store.close()
    return out


async def latency_figures(
    dsn: str, embedder: LocalEmbedder, words: list[str], sizes: tuple[int, ...], queries: int
) -> dict[str, Any]:
    rng = random.Random(7)
    store = await Store.connect(dsn, min_size=1, max_size=4)
    out: dict[str, Any] = {}
    try:
        ks = KnowledgeStore(store.db)
        k = Knowledge(ks, embedder, KnowledgeSettings())
        base = await k.catalog.kb("bench")
        loaded = 0
        batch = 2000
        for size in sizes:
            started = time.perf_counter()
            while loaded < size:
                n = min(batch, size - loaded)
                texts = [" ".join(rng.choices(words, k=rng.randint(40, 120))) for _ in range(n)]
                added = await ks.add_document(
                    base,
                    name=f"synthetic-{loaded}.txt",
                    content=f"{loaded}".encode(),
                    media_type="text/plain",
                )
                job = await ks.claim_job(owner="bench", lease_seconds=600)
                assert job is not None and job.document.id == added.document.id
                vectors = embedder.embed_sync(texts)
                chunks = [
                    NewChunk(
                        ordinal=i, page=None, section="", content=t, tokens=len(t) // 4, embedding=v
                    )
                    for i, (t, v) in enumerate(zip(texts, vectors, strict=True))
                ]
                await ks.finish_job(job, chunks, pages=None)
                loaded += n
            print(
                f"  loaded {size:,} passages ({time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
            )
            conn = await asyncpg.connect(dsn)
            try:
                await conn.execute("VACUUM ANALYZE kb_chunks")
            finally:
                await conn.close()
            qs = [" ".join(rng.choices(words, k=rng.randint(4, 10))) for _ in range(queries)]
            for q in qs[:5]:  # warm the cache
                await k.retrieval.search(q, kbs=["bench"])
            sql_ms: list[float] = []
            total_ms: list[float] = []
            lexical_ms: list[float] = []
            for q in qs:
                vector = embedder.embed_sync([q])[0]
                t = time.perf_counter()
                await ks.search(
                    q,
                    kb_ids=[base.id],
                    vector=vector,
                    vector_kb_ids=[base.id],
                    candidates=40,
                    limit=5,
                )
                sql_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                await ks.search(
                    q, kb_ids=[base.id], vector=None, vector_kb_ids=[], candidates=40, limit=5
                )
                lexical_ms.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                await k.retrieval.search(q, kbs=["bench"], limit=5)
                total_ms.append((time.perf_counter() - t) * 1000)
            out[str(size)] = {
                "hybrid_sql_ms": {
                    "p50": round(_pct(sql_ms, 0.5), 2),
                    "p99": round(_pct(sql_ms, 0.99), 2),
                },
                "lexical_sql_ms": {
                    "p50": round(_pct(lexical_ms, 0.5), 2),
                    "p99": round(_pct(lexical_ms, 0.99), 2),
                },
                "with_embedding_ms": {
                    "p50": round(_pct(total_ms, 0.5), 2),
                    "p99": round(_pct(total_ms, 0.99), 2),
                },
                "queries": queries,
            }
            print(f"  {size:,} passages: {out[str(size)]}", file=sys.stderr)
    finally:
        await store.close()
    return out


async def recall_figures(dsn: str, embedder: LocalEmbedder) -> dict[str, Any]:
    store = await Store.connect(dsn, min_size=1, max_size=4)
    try:
        k = Knowledge(KnowledgeStore(store.db), embedder, KnowledgeSettings())
        docs = corpus()
        text = _norm(" ".join(docs.values()))
        for _, phrase in QUESTIONS:
            assert _norm(phrase) in text, f"phrase not in the corpus: {phrase!r}"
        for name, body in sorted(docs.items()):
            await k.add(name, body.encode(), kb="recall")
        while await k.process_one():
            pass
        found = {"lexical": 0, "vector": 0, "fused": 0}
        misses: dict[str, list[str]] = {m: [] for m in found}
        for question, phrase in QUESTIONS:
            hits = (await k.retrieval.search(question, kbs=["recall"], limit=80)).hits
            ranked = {
                "lexical": sorted(
                    (h for h in hits if h.lexical_rank), key=lambda h: h.lexical_rank or 0
                ),
                "vector": sorted(
                    (h for h in hits if h.vector_rank), key=lambda h: h.vector_rank or 0
                ),
                "fused": list(hits),
            }
            for mode, order in ranked.items():
                if any(_norm(phrase) in _norm(h.content) for h in order[:5]):
                    found[mode] += 1
                else:
                    misses[mode].append(question)
        passages = sum(d.chunk_count for d in await k.store.list_documents(kb_name="recall"))
    finally:
        await store.close()
    n = len(QUESTIONS)
    return {
        "questions": n,
        "passages": passages,
        "recall_at_5": {m: round(v / n, 3) for m, v in found.items()},
        "misses": misses,
    }


async def run_kb(
    srv: Server, *, sizes: tuple[int, ...], pages: int, queries: int, chunks: int = 1000
) -> dict[str, Any]:
    embedder = LocalEmbedder()
    words = re.findall(r"[A-Za-z]{3,}", " ".join(corpus().values()))
    results: dict[str, Any] = {"embedder": {"model": embedder.model}}
    results["embedder"].update(await embedder_figures(embedder, words, chunks))
    print(f"  embedder: {results['embedder']}", file=sys.stderr)
    async with scratch_database(srv) as dsn:
        results["ingest"] = await ingest_figures(dsn, embedder, " ".join(corpus().values()), pages)
    async with scratch_database(srv) as dsn:
        results["recall"] = await recall_figures(dsn, embedder)
    print(f"  recall: {results['recall']['recall_at_5']}", file=sys.stderr)
    async with scratch_database(srv) as dsn:
        results["citations"] = await citation_figures(dsn, embedder)
    print(f"  citations: {results['citations']}", file=sys.stderr)
    async with scratch_database(srv) as dsn:
        results["latency"] = await latency_figures(dsn, embedder, words, sizes, queries)
    return results


def kb_markdown(kb: dict[str, Any]) -> list[str]:
    e = kb["embedder"]
    lines = [
        f"Local embedder `{e['model']}`: loaded in {e['load_s']} s; {e['chunks_per_s']:,} "
        f"chunks/s (~512 tokens each); a query embeds in {e['query_ms_p50']} ms "
        f"(p99 {e['query_ms_p99']}).",
        "",
        "| ingest (parse + chunk + embed + store) | pages/s | passages |",
        "|---|---|---|",
    ]
    for kind in ("pdf", "markdown"):
        fig = kb["ingest"][kind]
        lines.append(
            f"| {kind}, {kb['ingest']['pages']} pages | {fig['pages_per_s']} | {fig['passages']} |"
        )
    lines += [
        "",
        "| passages | hybrid SQL p50 / p99 ms | full-text SQL p50 / p99 ms | "
        "hybrid with query embedding p50 / p99 ms |",
        "|---|---|---|---|",
    ]
    for size, fig in kb["latency"].items():
        h, lx, t = fig["hybrid_sql_ms"], fig["lexical_sql_ms"], fig["with_embedding_ms"]
        lines.append(
            f"| {int(size):,} | {h['p50']} / {h['p99']} | {lx['p50']} / {lx['p99']} | "
            f"{t['p50']} / {t['p99']} |"
        )
    r = kb["recall"]
    at5 = r["recall_at_5"]
    lines += [
        "",
        f"Recall@5 over {r['questions']} questions on the spec ({r['passages']} passages):",
        "",
        "| full text alone | local embedder alone | fused (RRF) |",
        "|---|---|---|",
        f"| {at5['lexical']:.2f} | {at5['vector']:.2f} | {at5['fused']:.2f} |",
    ]
    if "citations" in kb:
        lines += citation_markdown(kb["citations"])
    return lines
