"""The tools file and the fail-closed policy catalog (invariant 9).

A tool reaches the model only through ``ToolPolicyCatalog``: it needs a valid policy entry
(built-in defaults, overridden or added by ``GATEWAY_TOOLS_FILE``), the entry must allow this
surface, chat and sender, and no deny list may name it. A deny always wins. A tool without a
valid entry is left out at start (logged, and listed by ``gateway doctor``) and a call to it by
name is refused, whatever the model says.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import structlog

from gateway.core.config_file import SETTING as CONFIG_SETTING
from gateway.core.config_file import TOOLS_SECTIONS, ConfigFile
from gateway.core.domain import ReplyTarget
from gateway.core.errors import ConfigError
from gateway.knowledge.numbering import PassageNumbers

log = structlog.get_logger(__name__)

Operation = Literal["read", "write", "destructive"]
Risk = Literal["low", "medium", "high"]
OPERATIONS: tuple[Operation, ...] = ("read", "write", "destructive")
RISKS: tuple[Risk, ...] = ("low", "medium", "high")
SETTING = "GATEWAY_TOOLS_FILE"

#: defaults for the tool loop, overridable in the file's ``[settings]`` table
DEFAULT_MAX_STEPS = 6
DEFAULT_TIMEOUT = 20.0
DEFAULT_MAX_OUTPUT_CHARS = 8000
DEFAULT_SCHEMA_TOKENS = 2000


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolPolicy:
    """One tool's policy entry. ``surfaces``/``chats``/``users`` ``None`` means "any";
    chats and users are ``platform:id`` patterns (``fnmatch``)."""

    name: str
    domains: tuple[str, ...]
    operation: Operation
    risk: Risk
    confirm: bool = False
    aliases: tuple[str, ...] = ()
    priority: int = 50
    surfaces: frozenset[str] | None = None
    chats: tuple[str, ...] | None = None
    users: tuple[str, ...] | None = None
    timeout_seconds: float | None = None
    max_output_chars: int | None = None
    #: who may approve a ``confirm`` call besides the asker (``platform:user`` patterns)
    approvers: tuple[str, ...] = ()
    source: str = "file"


_ENTRY_KEYS = {
    "domains",
    "operation",
    "risk",
    "confirm",
    "aliases",
    "priority",
    "surfaces",
    "chats",
    "users",
    "timeout_seconds",
    "max_output_chars",
    "approvers",
}


class PolicyInvalid(ValueError):
    """A policy entry that is malformed: the tool is left out (fail closed)."""


def _str_list(value: Any, what: str, *, empty_ok: bool = True) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise PolicyInvalid(f"{what} must be a list of non-empty strings")
    if not value and not empty_ok:
        raise PolicyInvalid(f"{what} must name at least one")
    return tuple(v.strip() for v in value)


def parse_entry(
    name: str, raw: Mapping[str, Any], *, base: ToolPolicy | None = None, source: str = "file"
) -> ToolPolicy:
    """A policy entry from the file, layered over ``base`` (a built-in default) when given.
    Without a base, ``domains``, ``operation`` and ``risk`` are required. Unknown keys make
    the entry malformed: a typo must not silently widen what a tool may do."""
    unknown = set(raw) - _ENTRY_KEYS
    if unknown:
        raise PolicyInvalid(f"unknown keys {sorted(unknown)}")
    values: dict[str, Any] = {}
    if base is not None:
        values = {
            "domains": base.domains,
            "operation": base.operation,
            "risk": base.risk,
            "confirm": base.confirm,
            "aliases": base.aliases,
            "priority": base.priority,
            "surfaces": base.surfaces,
            "chats": base.chats,
            "users": base.users,
            "timeout_seconds": base.timeout_seconds,
            "max_output_chars": base.max_output_chars,
            "approvers": base.approvers,
        }
    else:
        missing = {"domains", "operation", "risk"} - set(raw)
        if missing:
            raise PolicyInvalid(f"missing {sorted(missing)}")
    if "domains" in raw:
        values["domains"] = _str_list(raw["domains"], "domains", empty_ok=False)
    if "operation" in raw:
        if raw["operation"] not in OPERATIONS:
            raise PolicyInvalid(f"operation must be one of {list(OPERATIONS)}")
        values["operation"] = raw["operation"]
    if "risk" in raw:
        if raw["risk"] not in RISKS:
            raise PolicyInvalid(f"risk must be one of {list(RISKS)}")
        values["risk"] = raw["risk"]
    if "confirm" in raw:
        if not isinstance(raw["confirm"], bool):
            raise PolicyInvalid("confirm must be true or false")
        values["confirm"] = raw["confirm"]
    if "aliases" in raw:
        values["aliases"] = tuple(a.lower() for a in _str_list(raw["aliases"], "aliases"))
    if "priority" in raw:
        if not isinstance(raw["priority"], int) or isinstance(raw["priority"], bool):
            raise PolicyInvalid("priority must be an integer")
        values["priority"] = raw["priority"]
    if "surfaces" in raw:
        values["surfaces"] = frozenset(_str_list(raw["surfaces"], "surfaces"))
    for key in ("chats", "users", "approvers"):
        if key in raw:
            values[key] = _str_list(raw[key], key)
    if "timeout_seconds" in raw:
        t = raw["timeout_seconds"]
        if not isinstance(t, int | float) or isinstance(t, bool) or t <= 0:
            raise PolicyInvalid("timeout_seconds must be a positive number")
        values["timeout_seconds"] = float(t)
    if "max_output_chars" in raw:
        c = raw["max_output_chars"]
        if not isinstance(c, int) or isinstance(c, bool) or c < 100:
            raise PolicyInvalid("max_output_chars must be an integer >= 100")
        values["max_output_chars"] = c
    # a destructive tool always asks first, whatever the entry says
    if values["operation"] == "destructive":
        values["confirm"] = True
    return ToolPolicy(name=name, source=source, **values)


# --- the tools file --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class McpServerConfig:
    """``[mcp.NAME]``: a stdio ``command`` (+ ``args``, ``env``) or a streamable-HTTP ``url``
    (+ ``headers``); ``include``/``exclude`` filter its tools (fnmatch on the tool's own name)."""

    name: str
    command: tuple[str, ...] = ()
    url: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    connect_timeout: float = 10.0
    call_timeout: float = DEFAULT_TIMEOUT

    def wants(self, tool: str) -> bool:
        if self.include and not any(fnmatch.fnmatchcase(tool, p) for p in self.include):
            return False
        return not any(fnmatch.fnmatchcase(tool, p) for p in self.exclude)


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessList:
    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolsFile:
    servers: tuple[McpServerConfig, ...] = ()
    #: raw entries by tool name (validated when the catalog is built, so one bad entry
    #: leaves out one tool instead of stopping the gateway)
    entries: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    deny: tuple[str, ...] = ()
    chats: Mapping[str, AccessList] = field(default_factory=dict)
    users: Mapping[str, AccessList] = field(default_factory=dict)
    max_steps: int = DEFAULT_MAX_STEPS
    timeout_seconds: float = DEFAULT_TIMEOUT
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    max_schema_tokens: int = DEFAULT_SCHEMA_TOKENS
    #: approvers by pattern: ``"telegram:-100*" = ["telegram:42"]`` (chat ``platform:chat``
    #: or thread ``platform:chat:thread`` patterns)
    approvers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def _table(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(SETTING, f"{what} must be a table")
    return cast(Mapping[str, Any], value)


def _access(value: Any, what: str) -> AccessList:
    table = _table(value, what)
    extra = set(table) - {"allow", "deny"}
    if extra:
        raise ConfigError(SETTING, f"{what}: unknown keys {sorted(extra)}")
    try:
        allow = _str_list(table["allow"], f"{what}.allow") if "allow" in table else None
        deny = _str_list(table.get("deny", []), f"{what}.deny")
    except PolicyInvalid as exc:
        raise ConfigError(SETTING, str(exc)) from exc
    return AccessList(allow=allow, deny=deny)


def _server(name: str, raw: Any) -> McpServerConfig:
    where = f"[mcp.{name}]"
    table = _table(raw, where)
    known = {
        "command",
        "args",
        "url",
        "env",
        "headers",
        "include",
        "exclude",
        "connect_timeout",
        "timeout",
    }
    extra = set(table) - known
    if extra:
        raise ConfigError(SETTING, f"{where}: unknown keys {sorted(extra)}")
    command = table.get("command")
    url = table.get("url")
    if (command is None) == (url is None):
        raise ConfigError(SETTING, f"{where} needs exactly one of command or url")
    try:
        cmd: tuple[str, ...] = ()
        if command is not None:
            cmd = (command,) if isinstance(command, str) else _str_list(command, "command")
            cmd += _str_list(table.get("args", []), "args")
            if not cmd:
                raise PolicyInvalid("command is empty")
        if url is not None and (not isinstance(url, str) or not url.startswith("http")):
            raise PolicyInvalid("url must be an http(s) URL")
        include = _str_list(table.get("include", []), "include")
        exclude = _str_list(table.get("exclude", []), "exclude")
    except PolicyInvalid as exc:
        raise ConfigError(SETTING, f"{where}: {exc}") from exc
    maps: dict[str, dict[str, str]] = {}
    for key in ("env", "headers"):
        m = _table(table.get(key, {}), f"{where}.{key}")
        if not all(isinstance(v, str) for v in m.values()):
            raise ConfigError(SETTING, f"{where}.{key} values must be strings")
        maps[key] = dict(m)
    timeouts: dict[str, float] = {}
    for key, default in (("connect_timeout", 10.0), ("timeout", DEFAULT_TIMEOUT)):
        value = table.get(key, default)
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise ConfigError(SETTING, f"{where}.{key} must be a positive number")
        timeouts[key] = float(value)
    if "." in name or not name:
        raise ConfigError(SETTING, f"{where}: a server name cannot contain '.'")
    return McpServerConfig(
        name=name,
        command=cmd,
        url=url,
        env=maps["env"],
        headers=maps["headers"],
        include=include,
        exclude=exclude,
        connect_timeout=timeouts["connect_timeout"],
        call_timeout=timeouts["timeout"],
    )


def parse_tools_file(text: str) -> ToolsFile:
    """Parse the TOML text of a tools file. Structural errors raise ``ConfigError`` (exit 2);
    a malformed *policy entry* only leaves its tool out (see ``ToolPolicyCatalog``)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(SETTING, f"not valid TOML: {exc}") from exc
    return parse_tools_data(data)


def parse_tools_data(data: Mapping[str, Any]) -> ToolsFile:
    """The tools file's tables, parsed (from the tools file, or from the config file's
    sections of the same names)."""
    extra = set(data) - {"mcp", "tools", "access", "settings", "approvers"}
    if extra:
        raise ConfigError(SETTING, f"unknown top-level tables {sorted(extra)}")
    servers = tuple(_server(n, v) for n, v in _table(data.get("mcp", {}), "[mcp]").items())
    entries = {
        n: _table(v, f'[tools."{n}"]') for n, v in _table(data.get("tools", {}), "[tools]").items()
    }
    access = _table(data.get("access", {}), "[access]")
    extra = set(access) - {"deny", "chats", "users"}
    if extra:
        raise ConfigError(SETTING, f"[access]: unknown keys {sorted(extra)}")
    try:
        deny = _str_list(access.get("deny", []), "[access].deny")
    except PolicyInvalid as exc:
        raise ConfigError(SETTING, str(exc)) from exc
    chats = {
        k: _access(v, f'[access.chats."{k}"]')
        for k, v in _table(access.get("chats", {}), "[access.chats]").items()
    }
    users = {
        k: _access(v, f'[access.users."{k}"]')
        for k, v in _table(access.get("users", {}), "[access.users]").items()
    }
    settings = _table(data.get("settings", {}), "[settings]")
    numbers = {
        "max_steps": (int, DEFAULT_MAX_STEPS),
        "timeout_seconds": (float, DEFAULT_TIMEOUT),
        "max_output_chars": (int, DEFAULT_MAX_OUTPUT_CHARS),
        "max_schema_tokens": (int, DEFAULT_SCHEMA_TOKENS),
    }
    extra = set(settings) - set(numbers)
    if extra:
        raise ConfigError(SETTING, f"[settings]: unknown keys {sorted(extra)}")
    tuned: dict[str, Any] = {}
    for key, (kind, default) in numbers.items():
        value = settings.get(key, default)
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise ConfigError(SETTING, f"[settings].{key} must be a positive number")
        tuned[key] = kind(value)
    approvers: dict[str, tuple[str, ...]] = {}
    for pattern, who in _table(data.get("approvers", {}), "[approvers]").items():
        try:
            approvers[pattern] = _str_list(who, f'[approvers]."{pattern}"')
        except PolicyInvalid as exc:
            raise ConfigError(SETTING, str(exc)) from exc
    return ToolsFile(
        servers=servers,
        entries=entries,
        deny=deny,
        chats=chats,
        users=users,
        approvers=approvers,
        **tuned,
    )


def tools_file_for(path: Path | None, config: ConfigFile) -> ToolsFile:
    """The tools policy in force: ``GATEWAY_TOOLS_FILE``, or the tools sections of the config
    file (``GATEWAY_CONFIG_FILE``); both at once is refused (which one would win is unclear)."""
    if not config.has_tools_sections():
        return load_tools_file(path)
    if path is not None:
        raise ConfigError(
            SETTING, "the config file has tools sections too: keep them in one of the two files"
        )
    tables = {n: v for n, v in config.tables.items() if n in TOOLS_SECTIONS}
    try:
        return parse_tools_data(tables)
    except ConfigError as exc:
        raise ConfigError(CONFIG_SETTING, str(exc).removeprefix(f"{SETTING}: ")) from exc


def load_tools_file(path: Path | None) -> ToolsFile:
    if path is None:
        return ToolsFile()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(SETTING, f"cannot read {path}: {exc.strerror or exc}") from exc
    return parse_tools_file(text)


# --- tools and the catalog -------------------------------------------------------------------


_WIRE = re.compile(r"[^A-Za-z0-9_-]")


def wire_name(name: str) -> str:
    """The name the model sees: OpenAI allows only ``[A-Za-z0-9_-]{1,64}``, so the
    ``server.tool`` of an MCP tool goes on the wire as ``server__tool``."""
    return _WIRE.sub("_", name.replace(".", "__"))[:64]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """What the model is shown: a name, a description and a JSON-schema of arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    #: ``builtin`` or ``mcp:<server>``
    source: str = "builtin"

    @property
    def wire_name(self) -> str:
        return wire_name(self.name)

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.wire_name,
                "description": self.description,
                "parameters": dict(self.parameters) or {"type": "object", "properties": {}},
            },
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCaller:
    """Who is asking, and where: what the access rules and the tools themselves see."""

    session_id: int
    platform: str
    scope: str
    chat_id: str
    thread_id: str | None
    user_id: str | None
    #: the seq of the message this turn answers, and where its answer goes (approvals)
    turn_seq: int = 0
    target: ReplyTarget | None = None
    #: the place's profile's tool patterns: they only narrow (``None``: no profile limit)
    profile_tools: tuple[str, ...] | None = None
    #: the answer's one numbering of knowledge passages (``search_knowledge`` numbers what
    #: it returns in it, after the passages the turn was given); ``None`` outside a turn
    passages: PassageNumbers | None = field(default=None, compare=False)

    @property
    def chat_ref(self) -> str:
        return f"{self.platform}:{self.chat_id}"

    @property
    def user_ref(self) -> str | None:
        return None if self.user_id is None else f"{self.platform}:{self.user_id}"


ToolHandler = Callable[[Mapping[str, Any], ToolCaller], Awaitable[str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    spec: ToolSpec
    handler: ToolHandler


@dataclass(frozen=True, slots=True, kw_only=True)
class LeftOut:
    name: str
    reason: str


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


class ToolPolicyCatalog:
    """The tools that may ever be offered, each with its policy, and the per-call check."""

    def __init__(
        self,
        tools: Sequence[Tool],
        *,
        defaults: Mapping[str, ToolPolicy],
        tools_file: ToolsFile,
    ) -> None:
        self.file = tools_file
        self._tools: dict[str, Tool] = {}
        self._policies: dict[str, ToolPolicy] = {}
        self.left_out: list[LeftOut] = []
        for tool in tools:
            self.add(tool, defaults=defaults)
        # file entries for tools nobody provides: harmless, but worth a line
        for name in sorted(set(tools_file.entries) - {t.spec.name for t in tools}):
            log.info("tool_policy_without_tool", tool=name)

    def add(self, tool: Tool, *, defaults: Mapping[str, ToolPolicy]) -> ToolPolicy | None:
        name = tool.spec.name
        base = defaults.get(name)
        raw = self.file.entries.get(name)
        policy: ToolPolicy | None = base
        if raw is not None:
            try:
                policy = parse_entry(name, raw, base=base)
            except PolicyInvalid as exc:
                self._leave_out(name, f"malformed policy entry: {exc}")
                return None
        if policy is None:
            self._leave_out(name, "no policy entry")
            return None
        self._tools[name] = tool
        self._policies[name] = policy
        return policy

    def remove_source(self, source: str) -> None:
        for name in [n for n, t in self._tools.items() if t.spec.source == source]:
            del self._tools[name]
            del self._policies[name]
        self.left_out = [x for x in self.left_out if not x.name.startswith(source[4:] + ".")]

    def _leave_out(self, name: str, reason: str) -> None:
        self.left_out = [x for x in self.left_out if x.name != name]
        self.left_out.append(LeftOut(name=name, reason=reason))
        log.warning("tool_left_out", tool=name, reason=reason)

    @property
    def names(self) -> list[str]:
        return sorted(self._tools)

    def policy(self, name: str) -> ToolPolicy | None:
        return self._policies.get(name)

    def tool(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def check(self, name: str, caller: ToolCaller) -> str | None:
        """``None`` if ``caller`` may use ``name`` here, else the reason it may not. Layers:
        entry (fail closed) -> entry's own surfaces/chats/users -> global deny -> chat lists
        -> sender lists. A deny anywhere wins over any allow."""
        policy = self._policies.get(name)
        if policy is None or name not in self._tools:
            return "no valid policy entry"
        if caller.profile_tools is not None and not _matches(name, caller.profile_tools):
            return "not in this place's profile"
        if name in self.file.deny or _matches(name, self.file.deny):
            return "denied for everyone"
        if policy.surfaces is not None and caller.platform not in policy.surfaces:
            return f"not allowed on {caller.platform}"
        if policy.chats is not None and not _matches(caller.chat_ref, policy.chats):
            return "not allowed in this chat"
        if policy.users is not None and (
            caller.user_ref is None or not _matches(caller.user_ref, policy.users)
        ):
            return "not allowed for this sender"
        allowed_by_list = True
        for lists, ref in ((self.file.chats, caller.chat_ref), (self.file.users, caller.user_ref)):
            if ref is None:
                continue
            for pattern, rules in lists.items():
                if not fnmatch.fnmatchcase(ref, pattern):
                    continue
                if _matches(name, rules.deny):
                    return f"denied by the list for {pattern}"
                if rules.allow is not None and not _matches(name, rules.allow):
                    allowed_by_list = False
        if not allowed_by_list:
            return "not on this chat's or sender's allow list"
        return None

    def available(self, caller: ToolCaller) -> list[str]:
        return [n for n in self.names if self.check(n, caller) is None]

    def approvers_for(self, name: str, caller: ToolCaller) -> tuple[str, ...]:
        """Who besides the asker may approve ``name`` here: the tool's own entry plus the
        file's ``[approvers]`` for this chat or thread. In groups the default is nobody else."""
        policy = self._policies.get(name)
        found = list(policy.approvers if policy else ())
        refs = [caller.chat_ref, f"{caller.chat_ref}:{caller.thread_id or '-'}"]
        for pattern, who in self.file.approvers.items():
            if any(fnmatch.fnmatchcase(r, pattern) for r in refs):
                found.extend(who)
        return tuple(dict.fromkeys(found))
