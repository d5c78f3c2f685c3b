"""Who is answered is decided in one place: no adapter hands the core a message it decided to
answer by itself (``trigger=Trigger.ALWAYS`` / ``IF_FOLLOWING``, or an assignment of them);
only ``gateway.inbound.policy`` turns facts into those triggers. The scanner is first shown
to catch a planted violation."""

from __future__ import annotations

import ast

from testsupport.paths import REPO

ROOT = REPO
ANSWERING = frozenset({"ALWAYS", "IF_FOLLOWING"})


def answering_triggers(source: str) -> list[int]:
    """Lines where a trigger that asks for an answer is given or assigned (comparisons, as
    ``trigger is Trigger.ALWAYS``, only read a decision and are allowed)."""
    tree = ast.parse(source)
    compared = {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare)
        for sub in ast.walk(node)
    }
    lines: set[int] = set()
    for node in ast.walk(tree):
        values: list[ast.expr] = []
        if isinstance(node, ast.keyword) and node.arg == "trigger":
            values.append(node.value)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.Return) and node.value:
            values.append(node.value)
        for value in values:
            for sub in ast.walk(value):
                if (
                    id(sub) not in compared
                    and isinstance(sub, ast.Attribute)
                    and sub.attr in ANSWERING
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == "Trigger"
                ):
                    lines.add(sub.lineno)
    return sorted(lines)


def test_the_scanner_catches_an_adapter_deciding_by_itself() -> None:
    planted = (
        "def extract(e):\n"
        "    trigger = Trigger.ALWAYS if e.dm else Trigger.NEVER\n"
        "    if trigger is Trigger.ALWAYS:\n"  # reading a decision is fine
        "        command = name if trigger is Trigger.ALWAYS else None\n"
        "    return Envelope(trigger=Trigger.IF_FOLLOWING)\n"
    )
    assert answering_triggers(planted) == [2, 5]


def test_no_adapter_decides_who_is_answered() -> None:
    found = {
        path.relative_to(ROOT).as_posix(): hits
        for path in sorted((ROOT / "adapters").rglob("*.py"))
        if (hits := answering_triggers(path.read_text("utf-8")))
    }
    assert found == {}


def asks_the_policy(source: str) -> bool:
    """An import of the answer policy, or a call of ``decide``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "gateway.inbound.policy":
            return True
        if isinstance(node, ast.Import) and any(
            a.name == "gateway.inbound.policy" for a in node.names
        ):
            return True
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name == "decide":
                return True
    return False


def test_the_policy_scanner_catches_an_adapter_asking() -> None:
    assert asks_the_policy("from gateway.inbound.policy import decide\n")
    assert asks_the_policy("x = policy.decide(facts, rules)\n")
    assert not asks_the_policy('"""decided by ``gateway.inbound.policy``"""\n')


def test_no_adapter_asks_the_answer_policy() -> None:
    """The core's door applies the policy (``gateway.inbound.ingress.Door``): an adapter's
    extract reports facts, and no adapter module imports the policy or calls ``decide``."""
    found = {
        path.relative_to(ROOT).as_posix()
        for path in sorted((ROOT / "adapters").rglob("*.py"))
        if asks_the_policy(path.read_text("utf-8"))
    }
    assert found == set()
