"""Citation quality on a labelled set shipped in the repository (``kb_labelled/``: twenty
handbook documents, 53 questions, each with a phrase of its supporting passage).

Retrieval: recall@5 of full text alone, the local embedder alone, and both fused (a question
is found when a passage among the first five holds its supporting phrase).

Citations, through the gateway's own numbering (``PassageNumbers``, ``cite_answer``): the
passages a turn is given (``Knowledge.for_turn``) and what the model's own ``search_knowledge``
call returns are one numbering; two scripted models answer by citing what they were given:
``cites all`` every number, ``cites first`` the first passage of the turn and the first of its
search; both also cite an invented ``[99]``. Reported: citation precision (cited passages
that support the answer), citation recall (questions whose supporting passage is cited),
how many ``[n]`` resolved to a passage other than the one given under ``n`` (must be 0), and
how many invented numbers reached the sources (must be 0)."""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

from gateway.core.domain import Reply, SessionKey
from gateway.knowledge.citations import cite_answer
from gateway.knowledge.config import KnowledgeSettings
from gateway.knowledge.embed import LocalEmbedder
from gateway.knowledge.numbering import PassageNumbers
from gateway.knowledge.service import Knowledge
from gateway.tools.builtin import knowledge_result
from session_store.repos.knowledge import KnowledgeStore
from session_store.store import Store

KEY = SessionKey(platform="bench", scope="kb", chat_id="c", thread_id="t")
INVENTED = 99


def labelled() -> tuple[dict[str, str], list[dict[str, Any]]]:
    root = resources.files("benchmarks") / "kb_labelled"
    docs = {
        e.name: e.read_text(encoding="utf-8")
        for e in root.iterdir()
        if e.name.endswith(".md") and e.name != "SOURCES.md"
    }
    questions = json.loads((root / "questions.json").read_text(encoding="utf-8"))
    return docs, questions


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _supports(text: str, support: list[str]) -> bool:
    return any(_norm(s) in _norm(text) for s in support)


async def citation_figures(dsn: str, embedder: LocalEmbedder) -> dict[str, Any]:
    store = await Store.connect(dsn, min_size=1, max_size=4)
    try:
        k = Knowledge(KnowledgeStore(store.db), embedder, KnowledgeSettings())
        docs, questions = labelled()
        for name, body in sorted(docs.items()):
            await k.add(name, body.encode())
        while await k.process_one():
            pass
        recall = await _recall(k, questions)
        models = {"cites all": _cite_all, "cites first": _cite_first}
        cited = {name: await _citations(k, questions, script) for name, script in models.items()}
    finally:
        await store.close()
    return {
        "documents": len(docs),
        "questions": len(questions),
        "recall_at_5": recall,
        "models": cited,
    }


async def _recall(k: Knowledge, questions: list[dict[str, Any]]) -> dict[str, float]:
    found = {"lexical": 0, "vector": 0, "fused": 0}
    for q in questions:
        hits = (await k.retrieval.search(q["question"], kbs=["default"], limit=80)).hits
        ranked = {
            "lexical": sorted(
                (h for h in hits if h.lexical_rank), key=lambda h: h.lexical_rank or 0
            ),
            "vector": sorted((h for h in hits if h.vector_rank), key=lambda h: h.vector_rank or 0),
            "fused": list(hits),
        }
        for mode, order in ranked.items():
            found[mode] += any(_supports(h.content, q["support"]) for h in order[:5])
    return {m: round(v / len(questions), 3) for m, v in found.items()}


def _cite_all(turn: list[int], searched: list[int]) -> list[int]:
    return list(dict.fromkeys(turn + searched))


def _cite_first(turn: list[int], searched: list[int]) -> list[int]:
    return list(dict.fromkeys(turn[:1] + searched[:1]))


async def _citations(k: Knowledge, questions: list[dict[str, Any]], script: Any) -> dict[str, Any]:
    cited = supporting = answered = wrong = invented = 0
    for q in questions:
        found = await k.turns.for_turn(KEY, q["question"], token_budget=4000)
        numbers = found.numbered() if found is not None else PassageNumbers()
        given = {n: p.content for n, p in enumerate(found.passages if found else (), start=1)}
        # the model's own search: its result shows each passage's number
        shown = json.loads(
            knowledge_result(
                (await k.retrieval.search_in(KEY, q["question"], limit=5)).hits, numbers
            )
        )
        for row in shown:
            given.setdefault(row["n"], row["text"])
        turn = list(range(1, len(found.passages) + 1)) if found else []
        chosen = script(turn, [row["n"] for row in shown])
        text = "Answer " + " ".join(f"[{n}]" for n in [*chosen, INVENTED])
        (reply,), _ = cite_answer([Reply(text=text)], numbers)
        sources = reply.metadata.get("citations", [])
        invented += sum(1 for c in sources if c["ordinal"] == INVENTED)
        wrong += sum(1 for c in sources if given.get(c["ordinal"]) != c["passage"])
        good = [c for c in sources if _supports(c["passage"], q["support"])]
        cited += len(sources)
        supporting += len(good)
        answered += bool(good)
    return {
        "precision": round(supporting / cited, 3) if cited else 0.0,
        "recall": round(answered / len(questions), 3),
        "cited_per_answer": round(cited / len(questions), 2),
        "wrong_passage": wrong,
        "invented_in_sources": invented,
    }


def citation_markdown(c: dict[str, Any]) -> list[str]:
    at5 = c["recall_at_5"]
    lines = [
        "",
        f"Citation quality on the labelled set ({c['questions']} questions over "
        f"{c['documents']} documents, `benchmarks/kb_labelled/`):",
        "",
        "| recall@5 full text | recall@5 embedder | recall@5 fused |",
        "|---|---|---|",
        f"| {at5['lexical']:.2f} | {at5['vector']:.2f} | {at5['fused']:.2f} |",
        "",
        "| scripted model | citation precision | citation recall | cited per answer | "
        "[n] to a wrong passage | invented [n] in sources |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in c["models"].items():
        lines.append(
            f"| {name} | {m['precision']:.2f} | {m['recall']:.2f} | {m['cited_per_answer']} | "
            f"{m['wrong_passage']} | {m['invented_in_sources']} |"
        )
    return lines
