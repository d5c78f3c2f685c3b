"""Malformed input never gets a 5xx: hypothesis throws random paths, query strings,
headers, bytes and JSON at every public route of a real server (uvicorn, real PostgreSQL),
in both web chat modes; and schemathesis checks the admin API against its own OpenAPI document.

The counts of inputs tried per route and of 5xx answers are printed (``-s`` shows them)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import tomllib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

from gateway.http.webauth import hash_password
from session_store.repos.accounts import AccountStore
from testsupport.harness import running_gateway
from testsupport.paths import REPO

# random inputs by the thousand through the same code paths: run without coverage's line
# tracer, which doubles their CPU time for lines the other tests run too (pyproject.toml)
pytestmark = pytest.mark.untraced

TOKEN = "fuzz-token-0123456789abcdef-0123456789"
#: inputs per route and mode (per operation for schemathesis); FUZZ_EXAMPLES=500 for a deep run
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))

# --- a real gateway on its own event loop, for synchronous hypothesis tests -------------------


@contextmanager
def gateway_in_thread(database_url: str, **overrides: Any) -> Iterator[str]:
    ready: dict[str, str] = {}
    started = threading.Event()
    stop = threading.Event()
    failure: list[BaseException] = []

    async def main() -> None:
        try:
            async with running_gateway(database_url, **overrides) as gw:
                await AccountStore(gw.store.db).add("ann", hash_password("ann-password"))
                ready["url"] = gw.url.rstrip("/")
                started.set()
                # the stop signal comes from another thread: a threading.Event, awaited off-loop
                await asyncio.to_thread(stop.wait)
        except Exception as exc:  # noqa: BLE001 (handed to the test thread, which raises it)
            failure.append(exc)
            started.set()

    thread = threading.Thread(target=asyncio.run, args=(main(),), name="fuzzed-gateway")
    thread.start()
    try:
        assert started.wait(60), "gateway did not start"
        if failure:
            raise failure[0]
        yield ready["url"]
    finally:
        stop.set()
        thread.join(30)


# --- what to throw --------------------------------------------------------------------------

ROUTES: list[tuple[str, str]] = [
    ("GET", "/"),
    ("GET", "/login"),
    ("POST", "/login"),
    ("POST", "/logout"),
    ("GET", "/web/api/me"),
    ("GET", "/web/api/channels"),
    ("GET", "/web/api/channels/{c}/threads"),
    ("POST", "/web/api/channels/{c}/messages"),
    ("GET", "/web/api/channels/{c}/threads/{t}/messages"),
    ("GET", "/web/api/channels/{c}/threads/{t}/stream"),
    ("PATCH", "/web/api/channels/{c}/threads/{t}/messages/{n}"),
    ("DELETE", "/web/api/channels/{c}/threads/{t}/messages/{n}"),
    ("POST", "/web/api/channels/{c}/threads/{t}/messages/{n}/feedback"),
    ("GET", "/web/api/channels/{c}/threads/{t}/messages/{n}/citations"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
    ("GET", "/ops"),
    ("GET", "/ops/sessions/{t}"),
    ("GET", "/ops/static/{t}"),
    ("GET", "/api/v1/sessions"),
    ("GET", "/api/v1/sessions/{c}"),
    ("GET", "/api/v1/sessions/{c}/messages"),
    ("GET", "/api/v1/sessions/{c}/search"),
    ("GET", "/api/v1/search"),
    ("GET", "/api/v1/deliveries"),
    ("GET", "/api/v1/deliveries/{n}"),
    ("POST", "/api/v1/deliveries/{n}/retry"),
    ("GET", "/api/v1/inbound-events"),
    ("GET", "/api/v1/inbound-events/{n}"),
    ("GET", "/api/v1/stats"),
    ("GET", "/api/v1/kb/assignments"),
    ("POST", "/api/v1/kb/assignments"),
    ("DELETE", "/api/v1/kb/assignments"),
    ("POST", "/mcp"),
    ("DELETE", "/mcp"),
]
QUERY_NAMES = [
    "limit", "cursor", "platform", "chat", "thread", "status", "q",
    "after_seq", "before_seq", "session_id",
]  # fmt: skip
WORDS = ["general", "~ann", "~local", "t1", "web:local:general:t1", "1", "0", "-1"]

# weighted towards names that exist, so requests get past routing to the handlers
segment = st.one_of(
    st.sampled_from(WORDS),
    st.sampled_from(WORDS),
    st.text(max_size=40),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)
json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False),
    st.text(max_size=50),
    st.sampled_from(["\x00", "\ud800", "a\x00b", "é" * 3]),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=12,
)
shaped = st.fixed_dictionaries(
    {},
    optional={
        "text": json_value,
        "client_msg_id": st.one_of(st.sampled_from(["m1", "m2"]), json_value),
        "thread_id": json_value,
        "value": json_value,
        "name": json_value,
        "password": json_value,
        "jsonrpc": st.just("2.0"),
        "method": st.sampled_from(["initialize", "tools/list", "tools/call", "x"]),
        "id": json_value,
        "params": json_value,
        "user": json_value,
    },
)
_special = st.tuples(st.text(max_size=10), st.sampled_from(["\x00", "\ud800", "\udfff"]))
nasty_text = st.one_of(
    _special.map("".join),
    _special.map("".join),
    st.text(max_size=60),
    st.sampled_from(["hi", "/new", "/model x", "/help"]),
)
# well-formed but for one value: what reaches the handlers' own validation
almost_valid = st.one_of(
    st.fixed_dictionaries(
        {"text": nasty_text, "client_msg_id": st.sampled_from(["m1", "m2"]) | st.text(max_size=8)},
        optional={"thread_id": st.sampled_from(["t1", "m1"]) | json_value},
    ),
    st.fixed_dictionaries({"value": json_value | st.sampled_from([1, -1, 0])}),
    st.fixed_dictionaries(
        {"name": st.sampled_from(["ann", "bob"]) | nasty_text, "password": nasty_text}
    ),
)
body = st.one_of(
    almost_valid.map(lambda v: json.dumps(v).encode()),
    almost_valid.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=300),
    json_value.map(lambda v: json.dumps(v).encode()),
    shaped.map(lambda v: json.dumps(v).encode()),
    almost_valid.map(lambda v: json.dumps(v).encode()),
)
header_text = st.text(
    alphabet=st.characters(min_codepoint=32, max_codepoint=255, exclude_characters="\x7f"),
    max_size=60,
).map(lambda s: s.strip(" \t").encode("latin-1"))
random_headers = st.fixed_dictionaries(
    {},
    optional={
        "content-type": st.sampled_from(
            [b"application/json", b"text/plain", b"application/x-www-form-urlencoded", b"x"]
        )
        | header_text,
        "origin": st.sampled_from([b"http://evil.example", b"null"]) | header_text,
        "sec-fetch-site": st.sampled_from([b"cross-site", b"same-origin", b"none"]) | header_text,
        "cookie": header_text.map(lambda v: b"gw_session=" + v if v else b"gw_session=x"),
        "authorization": st.sampled_from([f"Bearer {TOKEN}".encode(), b"Bearer x"]) | header_text,
        "accept": st.sampled_from([b"application/json, text/event-stream", b"*/*"]) | header_text,
        "x-forwarded-for": header_text,
        "x-forwarded-user": header_text,
        "x-forwarded-proto": header_text,
        "mcp-session-id": header_text,
        "mcp-protocol-version": header_text,
        "range": header_text,
    },
)
# most requests look like our own page's (so they reach the handlers), the rest anything
same_site = st.fixed_dictionaries(
    {"content-type": st.just(b"application/json")},
    optional={
        "sec-fetch-site": st.just(b"same-origin"),
        "authorization": st.just(f"Bearer {TOKEN}".encode()),
        "accept": st.just(b"application/json, text/event-stream"),
        "cookie": header_text.map(lambda v: b"gw_session=" + v if v else b"gw_session=x"),
    },
)
headers = st.one_of(same_site, same_site, random_headers)
query = st.dictionaries(st.sampled_from(QUERY_NAMES) | st.text(max_size=8), segment, max_size=4)


def _path(template: str, values: list[str]) -> str:
    out = template
    for name, value in zip(("{c}", "{t}", "{n}"), values, strict=True):
        out = out.replace(name, quote(value, safe="") or "x")
    return out


def _fuzz(base: str, tried: Counter[str], errors: list[str]) -> None:
    with httpx.Client(base_url=base, timeout=httpx.Timeout(10.0)) as client:
        for method, template in ROUTES:
            _fuzz_route(client, method, template, tried, errors)


def _fuzz_route(
    client: httpx.Client, method: str, template: str, tried: Counter[str], errors: list[str]
) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        values=st.lists(segment, min_size=3, max_size=3),
        q=query,
        h=headers,
        b=body,
        other_method=st.sampled_from([None, None, None, "PUT", "PATCH", "DELETE"]),
    )
    def one(
        values: list[str],
        q: dict[str, str],
        h: dict[str, bytes],
        b: bytes,
        other_method: str | None,
    ) -> None:
        verb = other_method or method
        path = _path(template, values)
        request = client.build_request(
            verb,
            path,
            params=q,
            headers={k.encode(): v for k, v in h.items()},
            content=b if verb not in ("GET", "HEAD") else None,
        )
        response = client.send(request, stream=True)
        try:
            tried[f"{method} {template}"] += 1
            tried[f"status {response.status_code}"] += 1
            if response.status_code >= 500:
                errors.append(f"{verb} {path} {q} {h} {b[:100]!r} -> {response.status_code}")
        finally:
            response.close()

    one()


@pytest.mark.parametrize("mode", ["none", "accounts"])
def test_random_input_on_every_public_route_never_gets_a_5xx(
    database_url: str, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    tried: Counter[str] = Counter()
    errors: list[str] = []
    with gateway_in_thread(database_url, GATEWAY_WEB_AUTH=mode) as base:
        _fuzz(base, tried, errors)
    with capsys.disabled():
        total = sum(n for k, n in tried.items() if not k.startswith("status "))
        print(f"\nfuzzed routes (GATEWAY_WEB_AUTH={mode}): {total} inputs")
        for route, n in sorted(tried.items()):
            print(f"  {n:5d}  {route}")
        print(f"  5xx answers: {len(errors)}")
    assert len([k for k in tried if not k.startswith("status ")]) == len(ROUTES)
    assert errors == [], errors[:20]


# one test per generation mode: the two halves run side by side on the parallel workers
# (together they were one of the suite's slowest tests, on one worker)
@pytest.mark.parametrize("mode", ["positive", "negative"])
def test_the_admin_api_matches_its_openapi_document(
    database_url: str, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every check schemathesis has (``st run --checks all``), in each of its generation
    modes, with the repository's schemathesis.toml (the rejections no schema can express)."""
    schemathesis = pytest.importorskip("schemathesis")
    from schemathesis.config import SchemathesisConfig

    config = SchemathesisConfig.from_path(str(REPO / "schemathesis.toml"))
    with gateway_in_thread(database_url, GATEWAY_ADMIN_TOKEN=TOKEN) as base:
        schema = schemathesis.openapi.from_url(f"{base}/openapi.json", config=config)
        schema.config.update(headers={"Authorization": f"Bearer {TOKEN}"})
        # a failure's reproduction shows every value: the test token is no secret, and a
        # parameter called ``key`` (session keys) would be shown as [Filtered]
        schema.config.output.sanitization.update(enabled=False)
        failures: list[str] = []
        count = 0
        for result in _schemathesis_run(schema, base, mode):
            count += 1
            failures.extend(result)
    with capsys.disabled():
        print(f"\nschemathesis ({mode}): {count} operations, {len(failures)} failures")
    assert count > 5
    assert failures == [], failures[:10]


def _schemathesis_run(schema: Any, base: str, mode: str) -> Iterator[list[str]]:
    """Each operation of the schema, tested by hypothesis with every check: valid requests
    accepted and answered as documented (positive), invalid ones refused (negative), never
    a 5xx."""
    from schemathesis import GenerationMode
    from schemathesis.transport.requests import ManagedCookiesSession

    # one session for the run, as ``st run`` has: kept-alive connections instead of a new one
    # per request (schemathesis drops a response's cookies before the next request)
    with ManagedCookiesSession() as session:
        for result in schema.get_all_operations():
            operation = result.ok()
            yield _check_operation(operation, base, GenerationMode(mode), session)


def _check_operation(operation: Any, base: str, mode: Any, session: Any) -> list[str]:
    found: list[str] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        # schemathesis' own false positive (query parameters that take a list, to this
        # version): a query negated in a type it cannot carry (``tag=False``) that goes on the
        # wire as valid text (``?tag=false``) is not a schema-violating request: not sent
        assume(mode.value != "negative" or not _valid_on_the_wire(operation, case))
        case.validate_response(case.call(base_url=base, session=session))

    try:
        run()
    except Unsatisfiable:
        # an operation with nothing to get wrong (no parameters, no body): no invalid request
        assert mode.value == "negative", f"{operation.label}: no valid request generated"
    except BaseExceptionGroup as group:  # schemathesis' FailureGroup: the checks that failed
        found.append(f"{operation.label} ({mode.value}): {str(group)[:1500]}")
    return found


def _valid_on_the_wire(operation: Any, case: Any) -> bool:
    """Whether a case whose only negated part is its query is valid as sent. schemathesis
    negates a query parameter's type (``tag=False``, a list's ``tag="x"``) although a query
    carries only text: the request says ``?tag=false``, ``?tag=x``, a list of one valid tag.
    Checked against each query parameter's schema with its formats and patterns, a repeated
    parameter as the list the server reads, an integer's text as the integer: a value that
    breaks a pattern, a length or a format is still sent and must still be refused."""
    import jsonschema_rs  # schemathesis' own validator (its dependency), ECMA-262 patterns
    from schemathesis.core.parameters import ParameterLocation

    query = ParameterLocation.QUERY
    negated = [loc for loc, info in case.meta.components.items() if info.mode.is_negative]
    if negated != [query]:
        return False
    declared = {
        p["name"]: p
        for p in operation.definition.raw.get("parameters", [])
        if p.get("in") == "query"
    }
    sent = case.query if isinstance(case.query, dict) else {}
    if set(sent) - set(declared):
        return False
    components = operation.schema.raw_schema.get("components", {})
    for name, parameter in declared.items():
        if name not in sent:
            if parameter.get("required"):
                return False
            continue
        schema = {**parameter.get("schema", {}), "components": components}
        value = sent[name]
        items = [_text(v) for v in (value if isinstance(value, list) else [value])]
        if None in items:
            return False
        read = [_as_read(item, schema) for item in items if item is not None]
        candidate = read if _takes_a_list(schema) else read[0] if len(read) == 1 else read
        if not jsonschema_rs.validator_for(schema, validate_formats=True).is_valid(candidate):
            return False
    return True


def _text(value: Any) -> str | None:
    """A query value as sent: text, or a number's text; anything else is not judged here."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _takes_a_list(schema: dict[str, Any]) -> bool:
    return any(option.get("type") == "array" for option in [schema, *schema.get("anyOf", [])])


def _as_read(item: str, schema: dict[str, Any]) -> Any:
    """The server reads an integer parameter's text as an integer."""
    if any(option.get("type") == "integer" for option in [schema, *schema.get("anyOf", [])]):
        try:
            return int(item)
        except ValueError:
            return item
    return item


def test_no_schema_valid_request_is_excused_a_400() -> None:
    """A 400 ("Invalid cursor" and the like) for a request the OpenAPI document calls valid is
    a disagreement between the server and its schema (schemathesis' positive_data_acceptance
    check: "Schema-valid request rejected"): the schema must say exactly what is accepted,
    never have schemathesis.toml excuse it."""
    config = tomllib.loads((REPO / "schemathesis.toml").read_text(encoding="utf-8"))
    for operation in config.get("operations", []):
        checks = operation.get("checks", {}).get("positive_data_acceptance", {})
        assert "400" not in checks.get("expected-statuses", []), operation["include-name"]
