"""Hybrid retrieval on a real PostgreSQL: full text and pgvector fused by reciprocal rank."""

from __future__ import annotations

import hashlib
import math
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from gateway.core.domain import Reply, SessionKey
from gateway.knowledge.citations import TurnKnowledge
from gateway.knowledge.config import KnowledgeSettings
from gateway.knowledge.service import Knowledge
from session_store.repos.knowledge import RRF_K, KnowledgeBase, KnowledgeStore, PassageHit
from session_store.store import Store
from testsupport.documents import make_pdf
from testsupport.knowledge import drain
from testsupport.process import run_cli_in_process

#: words that share a direction in the concept embedder, whatever their spelling
_CONCEPTS = {"cat": 0, "cats": 0, "feline": 0, "kitten": 0, "dog": 1, "canine": 1, "puppy": 1}


class ConceptEmbedder:
    """256 dimensions (the indexed path): synonyms share an axis, other words are hashed
    onto the rest, so vector search finds what full text cannot and the other way round."""

    model = "test/concepts-256"

    async def dimension(self) -> int:
        return 256

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            v = [0.0] * 256
            for word in re.findall(r"[a-z]+", text.lower()):
                if word in _CONCEPTS:
                    v[_CONCEPTS[word]] += 3.0
                else:
                    v[8 + hashlib.sha256(word.encode()).digest()[0] % 248] += 0.2
            norm = math.sqrt(sum(x * x for x in v)) or 1.0
            out.append([x / norm for x in v])
        return out

    async def aclose(self) -> None:
        return None


@pytest.fixture
async def concepts(kstore: KnowledgeStore) -> Knowledge:
    k = Knowledge(kstore, ConceptEmbedder(), KnowledgeSettings())
    await k.add("felines.md", b"# Pets\n\nThe feline sleeps most of the day.")
    await k.add("food.md", b"# Prices\n\nCat food prices rose this spring.")
    await k.add("dogs.md", b"# Training\n\nCanine training takes patience.")
    await drain(k)
    return k


async def test_vector_and_full_text_are_fused_by_reciprocal_rank(concepts: Knowledge) -> None:
    assert await concepts.store.vector_enabled(), "the embedded PostgreSQL ships pgvector"
    result = await concepts.retrieval.search("cat", kbs=["default"], limit=3)
    assert result.mode == "hybrid"
    names = [h.document_name for h in result.hits]
    # found by both rankings first; the synonym only the vectors know second
    assert names[:2] == ["food.md", "felines.md"]
    both, vector_only = result.hits[0], result.hits[1]
    assert (both.lexical_rank, both.vector_rank) == (1, 1)
    assert math.isclose(both.score, 2 / (RRF_K + 1))
    assert vector_only.lexical_rank is None and vector_only.vector_rank == 2
    assert math.isclose(vector_only.score, 1 / (RRF_K + 2))
    assert vector_only.vector_score is not None and vector_only.vector_score > 0.5


async def test_lexical_only_when_the_base_has_another_model(
    concepts: Knowledge, kstore: KnowledgeStore
) -> None:
    # a reader with another model must not compare its vectors with this index
    other = Knowledge(kstore, _OtherModel(), KnowledgeSettings())
    result = await other.retrieval.search("cat", kbs=["default"], limit=3)
    assert result.mode == "lexical"
    assert [h.document_name for h in result.hits] == ["food.md"]


class _OtherModel(ConceptEmbedder):
    model = "test/another-model"


async def test_full_text_matches_any_word_of_a_question(concepts: Knowledge) -> None:
    result = await concepts.retrieval.search("how long does canine training take?", kbs=["default"])
    assert result.hits[0].document_name == "dogs.md"
    assert result.hits[0].lexical_rank == 1


async def test_search_is_scoped_to_the_named_bases(kstore: KnowledgeStore) -> None:
    k = Knowledge(kstore, ConceptEmbedder(), KnowledgeSettings())
    await k.add("a.md", b"Zebras are striped.", kb="thread:x")
    await k.add("b.md", b"Zebras graze.", kb="other")
    await drain(k)
    hits = (await k.retrieval.search("zebras", kbs=["thread:x", "default"])).hits
    assert [h.document_name for h in hits] == ["a.md"]
    assert (await k.retrieval.search("zebras", kbs=["nothing"])).hits == ()


async def test_a_changed_model_reembeds_through_jobs(kstore: KnowledgeStore) -> None:
    k = Knowledge(kstore, ConceptEmbedder(), KnowledgeSettings())
    added = await k.add("felines.md", b"The feline sleeps.")
    await drain(k)
    other = Knowledge(kstore, _OtherModel(), KnowledgeSettings())
    assert await other.catalog.adopt_model() == ["default"]  # what the gateway does at start
    assert await other.catalog.adopt_model() == []
    (base,) = await kstore.kbs(["default"])
    assert base.embedding_model == "test/another-model"
    doc = await kstore.get_document(added.document.id)
    assert doc is not None and doc.state == "queued"
    await drain(other)
    result = await other.retrieval.search("cat", kbs=["default"])
    assert result.mode == "hybrid" and result.hits[0].document_name == "felines.md"


async def test_removed_documents_leave_retrieval(concepts: Knowledge) -> None:
    food = next(d for d in await concepts.store.list_documents() if d.name == "food.md")
    assert await concepts.store.remove_document(food.id)
    assert not await concepts.store.remove_document(food.id)
    names = [
        h.document_name for h in (await concepts.retrieval.search("cat food", kbs=["default"])).hits
    ]
    assert "food.md" not in names


def _kb_files(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "policy.pdf").write_bytes(
        make_pdf(["Welcome to the handbook.", "Refunds are paid within thirty days."])
    )
    (docs / "notes.md").write_text("# Office\n\nThe office opens at nine.")
    (docs / "skip.bin").write_bytes(b"\x00\x01")
    return docs


def test_kb_cli_adds_and_finds_on_the_zero_config_database(tmp_path: Path) -> None:
    """Two real commands, each its own process on the embedded PostgreSQL it starts: what the
    first stored, the second finds."""
    docs = _kb_files(tmp_path)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHONPATH": os.getcwd(),
        "GATEWAY_DATA_DIR": str(tmp_path / "data"),
        "HF_HUB_OFFLINE": "1",
    }

    def gateway(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "gateway", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    added = gateway("kb", "add", str(docs))
    assert added.returncode == 0, added.stderr
    lines = added.stdout.strip().splitlines()
    assert [line.split("\t")[1] for line in lines] == ["ready", "ready"]
    assert sorted(line.split("\t")[-1] for line in lines) == ["notes.md", "policy.pdf"]
    found = gateway("kb", "search", "when are refunds paid", "--limit", "2")
    assert found.returncode == 0, found.stderr
    assert "policy.pdf, p. 2" in found.stdout.splitlines()[0]


async def test_kb_cli_add_list_search_remove_assign(tmp_path: Path, database_url: str) -> None:
    """Every kb command (``gateway.ops.cli.main`` in-process, on the test's database)."""
    docs = _kb_files(tmp_path)
    env = {
        "DATABASE_URL": database_url,
        "GATEWAY_DATA_DIR": str(tmp_path / "data"),
        "HF_HUB_OFFLINE": "1",
    }

    async def gateway(*args: str) -> tuple[int, str, str]:
        return await run_cli_in_process(list(args), env)

    code, out, err = await gateway("kb", "add", str(docs))
    assert code == 0, err
    lines = out.strip().splitlines()
    assert [line.split("\t")[1] for line in lines] == ["ready", "ready"]
    _, again, _ = await gateway("kb", "add", str(docs / "policy.pdf"))
    pdf_id = next(line.split("\t")[0] for line in lines if line.endswith("policy.pdf"))
    assert again.split("\t")[0] == pdf_id, "the same file twice is one document"
    code, out, err = await gateway("kb", "search", "when are refunds paid", "--limit", "2")
    assert code == 0, err
    assert "policy.pdf, p. 2" in out.splitlines()[0]
    assert (await gateway("kb", "remove", pdf_id))[0] == 0
    _, out, _ = await gateway("kb", "list")
    assert [line.split("\t")[-1] for line in out.strip().splitlines()] == ["notes.md"]
    code, out, _ = await gateway("kb", "add", str(tmp_path / "nope.pdf"))
    assert code == 1 and "failed: cannot read" in out
    # operator knowledge bases assigned to chats
    chat = "mattermost:chat.example:8065:town"
    code, out, err = await gateway("kb", "assign", "handbook", "--chat", chat)
    assert code == 0, err
    assert out.strip() == f"handbook assigned to {chat}"
    _, out, _ = await gateway("kb", "assignments")
    assert out.strip() == f"handbook\t{chat}"
    code, _, err = await gateway("kb", "unassign", "handbook", "--chat", chat)
    assert code == 0, err
    code, _, err = await gateway("kb", "unassign", "handbook", "--chat", chat)
    assert code == 1 and "is not assigned" in err
    assert (await gateway("kb", "assign", "handbook", "--chat", "nonsense"))[0] == 2


async def test_turn_passages_fit_the_token_budget(concepts: Knowledge) -> None:
    key = SessionKey(platform="p", scope="s", chat_id="c", thread_id="t")
    assert await concepts.turns.for_turn(key, "cat food prices", token_budget=20) is None
    found = await concepts.turns.for_turn(key, "cat food prices", token_budget=4000)
    assert found is not None
    assert found.passages[0].document_name == "food.md"
    assert found.prompt.splitlines()[2] == "[1] food.md — Prices"
    assert found.trace["chosen"] == [p.chunk_id for p in found.passages]


def test_cite_adds_footnotes_only_for_passages_the_model_cited() -> None:
    hits = tuple(
        PassageHit(
            chunk_id=10 + n,
            document_id=n,
            document_name=f"doc{n}.pdf",
            kb_name="default",
            ordinal=0,
            page=n + 1,
            section="Intro" if n == 1 else "",
            content=f"passage {n}",
            score=0.03,
            lexical_rank=1,
            lexical_score=0.1,
            vector_rank=None,
            vector_score=None,
        )
        for n in range(3)
    )
    tk = TurnKnowledge(passages=hits, prompt="", trace={"query": "q"})
    first, second = tk.cite([Reply(text="A [2] and [7] and [2]."), Reply(text="plain")])
    assert first.text == "A [2] and [7] and [2].\n\nSources:\n[2] doc1.pdf, p. 2 — Intro"
    assert [c["chunk_id"] for c in first.metadata["citations"]] == [11]
    assert first.metadata["retrieval_trace"] == {"query": "q"}
    assert second.text == "plain" and "citations" not in second.metadata


async def test_without_pgvector_ingest_and_search_are_full_text_only(store: Store) -> None:
    # what a server without the vector extension gets: no embedding column in use
    ks = KnowledgeStore(store.db)
    ks._vector = False
    k = Knowledge(ks, ConceptEmbedder(), KnowledgeSettings())
    await k.add("food.md", b"Cat food prices rose.")
    await k.add("felines.md", b"The feline sleeps.")
    await drain(k)
    result = await k.retrieval.search("cat", kbs=["default"])
    assert result.mode == "lexical"
    assert [h.document_name for h in result.hits] == ["food.md"]
    assert result.hits[0].vector_rank is None


async def test_an_older_pgvector_without_halfvec_searches_the_full_precision_index(
    knowledge: Knowledge, store: Store
) -> None:
    """pgvector before 0.7 has no halfvec: migration 0011 keeps 0007's index, and the vector
    ranking uses whichever index is there."""
    await knowledge.add("pets.md", b"# Pets\n\nCats like warm windowsills.\n")
    await drain(knowledge)
    async with store.db.connection() as conn:
        await conn.execute("DROP INDEX kb_chunks_embedding_256h")
        await conn.execute(
            "CREATE INDEX kb_chunks_embedding_256 ON kb_chunks "
            "USING hnsw ((embedding::vector(256)) vector_cosine_ops) WHERE dims = 256"
        )
    older = Knowledge(KnowledgeStore(store.db), knowledge.embedder, KnowledgeSettings())
    found = await older.retrieval.search("feline sunbathing spot", kbs=["default"])
    assert found.mode == "hybrid"
    assert [h.vector_rank for h in found.hits] == [1]


class _CountingStore(KnowledgeStore):
    """The real store, counting the per-turn scope lookups."""

    scope_lookups = 0

    async def scope_kbs(
        self, names: Sequence[str], *, platform: str, scope: str, chat_id: str
    ) -> list[KnowledgeBase]:
        self.scope_lookups += 1
        return await super().scope_kbs(names, platform=platform, scope=scope, chat_id=chat_id)


async def test_turns_skip_the_scope_lookup_while_no_knowledge_base_exists(store: Store) -> None:
    """no database round trip per turn on a gateway without documents, and a base
    made here is searched by the very next turn."""
    counting = _CountingStore(store.db)
    k = Knowledge(counting, ConceptEmbedder(), KnowledgeSettings())
    key = SessionKey(platform="p", scope="s", chat_id="c", thread_id="t")
    for _ in range(5):
        assert await k.turns.for_turn(key, "cat food prices", token_budget=4000) is None
    assert counting.scope_lookups == 1
    await k.add("food.md", b"# Prices\n\nCat food prices rose this spring.")
    await drain(k)
    assert await k.turns.for_turn(key, "cat food prices", token_budget=4000) is not None
    assert counting.scope_lookups == 2
