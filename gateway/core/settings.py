"""Settings, named exactly as ``interface.md`` lists them (environment or a ``.env`` file).

A bad or contradictory value raises ``ConfigError`` naming the setting; the CLI exits with 2.
Each surface's own settings (a platform's ``<PLATFORM>_*`` names) live in its package as a
``SurfaceSettings`` class (``gateway.core.plugins``), read from the same sources through
``Settings.surface``; the CLI reads every installed surface's at start
(``registry.check_settings``), so a bad one is named and exits 2 as a core one does.
Nothing is read at import: ``load_settings()`` is called by the CLI (and by tests, explicitly).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import platformdirs
from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode
from pydantic_settings.exceptions import SettingsError

from gateway.core.access_settings import check_access
from gateway.core.errors import ConfigError
from gateway.core.ops_settings import OpsAccessSettings
from gateway.core.settings_groups import SETTINGS_SOURCES, RetentionSettings, read_groups


def _default_data_dir() -> Path:
    """the per-user data directory (`~/.local/share/chat-gateway` on Linux)"""
    return Path(platformdirs.user_data_dir("chat-gateway", appauthor=False))


def user_env_file() -> Path:
    """The per-user settings file: ``~/.config/chat-gateway/.env`` on Linux."""
    return Path(platformdirs.user_config_dir("chat-gateway", appauthor=False)) / ".env"


def env_file_path() -> Path:
    """The one settings file every command reads and ``gateway setup`` writes, first found:
    ``GATEWAY_ENV_FILE`` when set (a service: ``/etc/chat-gateway/gateway.env``), else
    ``./.env`` when the current directory has one, else the per-user one (``user_env_file``).
    The environment's own variables win over the file's."""
    explicit = os.environ.get("GATEWAY_ENV_FILE", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    local = Path(".env")
    return local if local.is_file() else user_env_file()


def settings_source() -> str:
    """The settings file read, or every place looked for one (``gateway run``, ``doctor``)."""
    path = env_file_path().absolute()
    if path.is_file():
        return str(path)
    if os.environ.get("GATEWAY_ENV_FILE", "").strip():
        return f"the environment only (no {path}, named by GATEWAY_ENV_FILE)"
    return f"the environment only (no {Path('.env').absolute()}, no {path})"


CsvList = Annotated[list[str], NoDecode]
SettingsT = TypeVar("SettingsT", bound=BaseSettings)


def split_csv(value: Any) -> Any:
    """A comma-separated string as a list (for ``CsvList`` fields: ``field_validator(...,
    mode="before")(split_csv)``)."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    model_config = SETTINGS_SOURCES
    #: what these settings were built from (explicit values, ``_env_file``): each surface's
    #: own settings are read from the same (``surface``)
    _sources: dict[str, Any] = PrivateAttr(default_factory=dict)
    _surfaces: dict[type[BaseSettings], BaseSettings] = PrivateAttr(default_factory=dict)

    if not TYPE_CHECKING:  # mypy keeps the signature pydantic's plugin gives the fields

        def __init__(self, **values: Any) -> None:
            sources = {"_env_file": type(self).model_config.get("env_file"), **values}
            super().__init__(**values, **read_groups(type(self), sources))
            self._sources = sources

    def surface(self, cls: type[SettingsT]) -> SettingsT:
        """A surface's own settings (a ``SurfaceSettings`` subclass), read from the same
        environment, ``.env`` file and explicit values as these; a bad value raises
        ``ConfigError`` naming the setting. Read once, then kept."""
        found = self._surfaces.get(cls)
        if not isinstance(found, cls):
            found = parsed(lambda: cls(**self._sources))
            self._surfaces[cls] = found
        return found

    # --- core -------------------------------------------------------------------------
    #: PostgreSQL DSN (`postgresql://...`); unset: an embedded PostgreSQL under GATEWAY_DATA_DIR
    database_url: str | None = Field(default=None, alias="DATABASE_URL")
    #: where the embedded database and local state live
    gateway_data_dir: Path = Field(default_factory=_default_data_dir, alias="GATEWAY_DATA_DIR")
    #: the address the HTTP server (webhooks, web chat, health, metrics) binds
    gateway_http_host: str = Field(default="127.0.0.1", alias="GATEWAY_HTTP_HOST")
    #: the HTTP server's port; `0` picks a free one (the URL is printed)
    gateway_http_port: int = Field(default=8080, ge=0, le=65535, alias="GATEWAY_HTTP_PORT")
    #: `json` or `console`; unset: `console` on a terminal, else `json`
    gateway_log_format: Literal["json", "console"] | None = Field(
        default=None, alias="GATEWAY_LOG_FORMAT"
    )
    #: the least level logged
    gateway_log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", alias="GATEWAY_LOG_LEVEL"
    )
    #: bearer token (32+ characters) for the admin API, `/mcp` and the operator pages; unset:
    #: loopback clients only
    gateway_admin_token: SecretStr | None = Field(default=None, alias="GATEWAY_ADMIN_TOKEN")
    #: database connections per process
    gateway_db_pool_size: int = Field(default=10, ge=2, le=500, alias="GATEWAY_DB_POOL_SIZE")
    #: turns run at once per process
    gateway_turn_workers: int = Field(default=8, ge=1, le=1000, alias="GATEWAY_TURN_WORKERS")
    #: sends run at once per process
    gateway_delivery_workers: int = Field(
        default=8, ge=1, le=1000, alias="GATEWAY_DELIVERY_WORKERS"
    )
    #: how long a claimed turn or delivery stays ours without renewal (crash take-over time)
    gateway_lease_seconds: float = Field(default=30.0, gt=0, alias="GATEWAY_LEASE_SECONDS")
    #: how often idle workers look for work claimed nowhere (other replicas, restarts)
    gateway_poll_seconds: float = Field(default=1.0, gt=0, alias="GATEWAY_POLL_SECONDS")
    #: transient send failures before a delivery is marked failed
    gateway_delivery_max_attempts: int = Field(
        default=8, ge=1, alias="GATEWAY_DELIVERY_MAX_ATTEMPTS"
    )
    #: serve the built-in web chat
    gateway_web_chat: bool = Field(default=True, alias="GATEWAY_WEB_CHAT")
    #: extra surfaces as ``module:factory`` (comma-separated); each factory takes the settings
    #: and returns a PlatformAdapter (for surfaces that are not built in)
    gateway_adapters: CsvList = Field(default_factory=list, alias="GATEWAY_ADAPTERS")
    #: answer messages from other bots (never our own)
    gateway_answer_bots: bool = Field(default=False, alias="GATEWAY_ANSWER_BOTS")
    # who the bot answers, one vocabulary for every platform (gateway.inbound.policy; each
    # platform's older lists are shorthands for these): places ``platform:scope:chat[:thread]``
    # with ``*``, people ``platform:id``; a list restricts only the platforms it names
    #: places the bot answers in (`platform:scope:chat[:thread]`, any part `*`); unset: all
    gateway_allowed_places: CsvList = Field(default_factory=list, alias="GATEWAY_ALLOWED_PLACES")
    #: people the bot answers (`platform:id`); unset: everyone
    gateway_allowed_people: CsvList = Field(default_factory=list, alias="GATEWAY_ALLOWED_PEOPLE")
    #: places where every message is answered, not only mentions, replies and commands
    gateway_answer_all_places: CsvList = Field(
        default_factory=list, alias="GATEWAY_ANSWER_ALL_PLACES"
    )
    #: thread follow-ups are answered only when they mention the bot, on every platform
    gateway_require_mention: bool = Field(default=False, alias="GATEWAY_REQUIRE_MENTION")

    # --- who may use the HTTP server (gateway/security.py, gateway/webauth.py) ----------
    #: web chat identity: one local user (loopback binds only), accounts, a proxy header, or
    #: single sign-on with an OpenID Connect provider
    gateway_web_auth: Literal["none", "accounts", "proxy", "oidc"] = Field(
        default="none", alias="GATEWAY_WEB_AUTH"
    )
    #: for `GATEWAY_WEB_AUTH=proxy`: the header holding the signed-in user name
    gateway_web_auth_header: str = Field(
        default="X-Forwarded-User", min_length=1, alias="GATEWAY_WEB_AUTH_HEADER"
    )
    #: proxy addresses (CIDRs) whose GATEWAY_WEB_AUTH_HEADER is believed
    gateway_trusted_proxies: CsvList = Field(default_factory=list, alias="GATEWAY_TRUSTED_PROXIES")
    #: the address people open the gateway at (`https://chat.example.com`), behind any proxy;
    #: builds the sign-in provider's redirect URI (`<this>/login/callback`)
    gateway_public_url: str | None = Field(default=None, alias="GATEWAY_PUBLIC_URL")
    #: for `GATEWAY_WEB_AUTH=oidc`: the provider's issuer URL (its discovery document is
    #: `<issuer>/.well-known/openid-configuration`)
    gateway_oidc_issuer: str | None = Field(default=None, alias="GATEWAY_OIDC_ISSUER")
    #: for `GATEWAY_WEB_AUTH=oidc`: the client id the provider gave the gateway
    gateway_oidc_client_id: str | None = Field(default=None, alias="GATEWAY_OIDC_CLIENT_ID")
    #: for `GATEWAY_WEB_AUTH=oidc`: the client secret; unset: a public client (PKCE only)
    gateway_oidc_client_secret: SecretStr | None = Field(
        default=None, alias="GATEWAY_OIDC_CLIENT_SECRET"
    )
    #: for `GATEWAY_WEB_AUTH=oidc`: e-mail domains (verified by the provider) that may sign in;
    #: `*`: any verified e-mail
    gateway_oidc_allowed_domains: CsvList = Field(
        default_factory=list, alias="GATEWAY_OIDC_ALLOWED_DOMAINS"
    )
    #: for `GATEWAY_WEB_AUTH=oidc`: values of the ID token's `groups` claim that may sign in
    gateway_oidc_allowed_groups: CsvList = Field(
        default_factory=list, alias="GATEWAY_OIDC_ALLOWED_GROUPS"
    )
    #: for `GATEWAY_WEB_AUTH=oidc`: the scopes asked for (`openid` is required)
    gateway_oidc_scopes: str = Field(
        default="openid email profile", min_length=1, alias="GATEWAY_OIDC_SCOPES"
    )
    #: Host header values accepted; unset: loopback names on a loopback bind, else any
    gateway_allowed_hosts: CsvList = Field(default_factory=list, alias="GATEWAY_ALLOWED_HOSTS")
    #: largest request body on any route (413 beyond, refused before it is read whole)
    gateway_max_body_bytes: int = Field(
        default=1_048_576, ge=1024, le=2**40, alias="GATEWAY_MAX_BODY_BYTES"
    )
    #: live streams (SSE) one client address may hold open at once
    gateway_sse_per_client: int = Field(default=16, ge=1, alias="GATEWAY_SSE_PER_CLIENT")
    #: connections and tasks uvicorn serves at once (503 beyond)
    gateway_http_concurrency: int = Field(default=1000, ge=8, alias="GATEWAY_HTTP_CONCURRENCY")
    #: /metrics needs the admin token too (when one is set)
    gateway_metrics_auth: bool = Field(default=False, alias="GATEWAY_METRICS_AUTH")

    # --- agent ------------------------------------------------------------------------
    #: who answers: `echo`, `openai` (any OpenAI-compatible server), `http` (your service) or
    #: `module:callable` (a Python agent)
    agent: str = Field(default="echo", alias="AGENT")
    #: for `AGENT=openai`: the chat-completions server, e.g. `http://localhost:11434/v1` (Ollama)
    #: or `http://localhost:8000/v1` (vLLM)
    openai_base_url: str = Field(default="https://api.openai.com/v1", alias="OPENAI_BASE_URL")
    #: for `AGENT=openai`: the API key, sent as a bearer token
    openai_api_key: SecretStr | None = Field(default=None, alias="OPENAI_API_KEY")
    #: the default model
    agent_model: str = Field(default="gpt-4o-mini", alias="AGENT_MODEL")
    #: for `AGENT=http`: where each turn is POSTed
    agent_http_url: str | None = Field(default=None, alias="AGENT_HTTP_URL")
    #: per agent call; a timeout is an apology in the thread
    agent_timeout_seconds: float = Field(default=60.0, gt=0, alias="AGENT_TIMEOUT_SECONDS")
    #: the start of every system prompt
    agent_system_prompt: str = Field(
        default="You are a helpful assistant in a team chat.", alias="AGENT_SYSTEM_PROMPT"
    )
    #: shared secret: AGENT=http requests carry an HMAC-SHA256 of timestamp and body
    agent_http_secret: SecretStr | None = Field(default=None, alias="AGENT_HTTP_SECRET")
    #: models a person may pick with /model (unset: only AGENT_MODEL)
    agent_models: CsvList = Field(default_factory=list, alias="AGENT_MODELS")
    #: ``model=tokens`` pairs overriding the built-in context-window table
    agent_context_windows: CsvList = Field(default_factory=list, alias="AGENT_CONTEXT_WINDOWS")
    #: window assumed for a model the table does not know
    agent_default_context_window: int = Field(
        default=8192, ge=1024, alias="AGENT_DEFAULT_CONTEXT_WINDOW"
    )
    #: output tokens reserved in every window (and asked for as the completion limit)
    agent_max_output_tokens: int = Field(default=1024, ge=16, alias="AGENT_MAX_OUTPUT_TOKENS")
    #: optional cap on the prompt below the model's window (cost control)
    agent_max_prompt_tokens: int | None = Field(
        default=None, ge=256, alias="AGENT_MAX_PROMPT_TOKENS"
    )
    #: rolling summaries of history that no longer fits (cold path)
    agent_summaries: bool = Field(default=True, alias="AGENT_SUMMARIES")
    #: the size of a rolling summary
    agent_summary_tokens: int = Field(default=512, ge=64, alias="AGENT_SUMMARY_TOKENS")
    #: messages arriving during a run: ``queue`` them for the next run, or ``interrupt`` it
    agent_busy_mode: Literal["queue", "interrupt"] = Field(default="queue", alias="AGENT_BUSY_MODE")
    #: a message that arrives while an answer is written: ``queue`` it for the next answer,
    #: or ``restart``: stop the answer and write one that covers everything (a place's
    #: profile may say otherwise)
    gateway_while_answering: Literal["queue", "restart"] = Field(
        default="queue", alias="GATEWAY_WHILE_ANSWERING"
    )
    #: a turn starts once the thread has been quiet this many seconds; the messages in
    #: between get one answer (0: off; a place's profile may say otherwise)
    gateway_burst_seconds: float = Field(default=0.0, ge=0, le=10, alias="GATEWAY_BURST_SECONDS")
    #: models tried in order, on the same server, when the chosen one keeps failing (429, 5xx,
    #: timeout): after two failed requests, or at once while its breaker is open
    agent_fallback_models: CsvList = Field(default_factory=list, alias="AGENT_FALLBACK_MODELS")
    #: seconds one turn may spend on a struggling provider (retries after Retry-After or a
    #: backoff, and the fallbacks) before it apologises
    agent_retry_deadline_seconds: float = Field(
        default=90.0, gt=0, le=3600, alias="AGENT_RETRY_DEADLINE_SECONDS"
    )
    #: seconds a turn waits on the provider before the thread gets one status line ("the model
    #: is busy, retrying in 20 s")
    agent_status_after_seconds: float = Field(
        default=10.0, gt=0, alias="AGENT_STATUS_AFTER_SECONDS"
    )
    #: failed requests in a row (on every replica) that open a model's circuit breaker
    agent_breaker_failures: int = Field(default=5, ge=1, alias="AGENT_BREAKER_FAILURES")
    #: seconds a model's breaker stays open before one request probes it
    agent_breaker_seconds: float = Field(default=30.0, gt=0, alias="AGENT_BREAKER_SECONDS")

    # --- tools ---------------------------------------------------------------
    #: the tools file (TOML: MCP servers, policy entries, access lists); unset: built-ins only
    gateway_tools_file: Path | None = Field(default=None, alias="GATEWAY_TOOLS_FILE")
    #: the config file (TOML: profiles and places, prices and budgets; the tools file's
    #: sections may live in it too); unset: one default profile, no budgets
    gateway_config_file: Path | None = Field(default=None, alias="GATEWAY_CONFIG_FILE")
    #: an approval request not decided within this many seconds expires ("not approved")
    gateway_approval_seconds: float = Field(
        default=600.0, gt=0, le=86400 * 7, alias="GATEWAY_APPROVAL_SECONDS"
    )
    #: offer tools to the agent at all (``false``: the agent only talks)
    gateway_tools: bool = Field(default=True, alias="GATEWAY_TOOLS")
    #: when keyword routing's confidence in a message is below this (0 to 1), one short side
    #: query asks the profile's cheapest model which tool families it needs; 0 (the default:
    #: each such message costs one more model call) never asks; 0.5 is a good start
    gateway_routing_ask_below: float = Field(
        default=0, ge=0, le=1, alias="GATEWAY_ROUTING_ASK_BELOW"
    )
    #: the routing side query's time limit; past it (or on an error) the read-only bundle
    #: is offered
    gateway_routing_ask_seconds: float = Field(
        default=3.0, gt=0, le=60, alias="GATEWAY_ROUTING_ASK_SECONDS"
    )

    # --- streaming -----------------------------------------------------------
    # each surface may override GATEWAY_STREAMING with a setting of its own
    #: stream answers into the thread while the model writes them (agents that can stream)
    gateway_streaming: bool = Field(default=True, alias="GATEWAY_STREAMING")
    #: the least time between two edits of one preview message
    gateway_stream_edit_seconds: float = Field(
        default=1.0, ge=0.2, le=60, alias="GATEWAY_STREAM_EDIT_SECONDS"
    )

    # --- conversations that change -----------------------------------------------
    # a place's profile may set its own (on_edit, on_delete)
    #: an edit of the thread's latest question after its answer: `update` writes the answer
    #: again in place (a new reply where the platform cannot edit), `context` only changes
    #: what later turns see
    gateway_on_edit: Literal["update", "context"] = Field(default="update", alias="GATEWAY_ON_EDIT")
    #: a deleted message's answer: `keep` it, or `retract` it (deleted on the platform too)
    gateway_on_delete: Literal["keep", "retract"] = Field(default="keep", alias="GATEWAY_ON_DELETE")

    # --- knowledge base ------------------------------------------------------
    #: an OpenAI-compatible `/v1/embeddings` server for the knowledge base; unset: the built-in
    #: local embedder (no download)
    embedding_base_url: str | None = Field(default=None, alias="EMBEDDING_BASE_URL")
    #: the embeddings server's API key
    embedding_api_key: SecretStr | None = Field(default=None, alias="EMBEDDING_API_KEY")
    #: the embeddings model (with EMBEDDING_BASE_URL)
    embedding_model: str = Field(default="text-embedding-3-small", alias="EMBEDDING_MODEL")
    # --- files and voice ------------------------------------------------------
    #: an OpenAI-compatible `POST /v1/audio/transcriptions` server (OpenAI, Groq, a local
    #: faster-whisper server): voice notes and audio shared in a chat are transcribed and
    #: answered; unset: a voice note gets a short answer saying transcription is not set up
    transcription_base_url: str | None = Field(default=None, alias="TRANSCRIPTION_BASE_URL")
    #: the transcription server's API key
    transcription_api_key: SecretStr | None = Field(default=None, alias="TRANSCRIPTION_API_KEY")
    #: the transcription model (with TRANSCRIPTION_BASE_URL)
    transcription_model: str = Field(default="whisper-1", alias="TRANSCRIPTION_MODEL")
    #: largest file added to the knowledge base (fetched or uploaded)
    gateway_max_file_bytes: int = Field(
        default=20 * 1024 * 1024, ge=1, alias="GATEWAY_MAX_FILE_BYTES"
    )
    #: where the ``default`` knowledge base is searched: in every chat, or only in the chats
    #: it is assigned to (``gateway kb assign default --chat ...``), like any operator base
    gateway_kb_default: Literal["everywhere", "assigned"] = Field(
        default="everywhere", alias="GATEWAY_KB_DEFAULT"
    )
    #: each document added to a knowledge base gets a summary written by the agent's model
    #: (AGENT_MODEL, charged to the chat that shared it, or to `kb:NAME`), given to a question
    #: about the whole document when it does not fit; off: such a question gets the
    #: document's opening passages instead
    gateway_kb_summaries: bool = Field(default=True, alias="GATEWAY_KB_SUMMARIES")
    #: files shared with a question that go straight to the model as content parts (when it
    #: accepts them): ``images`` (PNG, JPEG, GIF, WebP as image_url parts), ``text`` (text,
    #: Markdown, CSV up to 32 KB as text parts); others, and all by default, are read into
    #: the thread's knowledge base
    agent_inline_files: CsvList = Field(default_factory=list, alias="AGENT_INLINE_FILES")
    #: the models that accept images (names or `fnmatch` patterns, e.g. `gpt-4o*`): an image
    #: shared with a question reaches them as an image; any other model gets the image's
    #: text, read by OCR (the `ocr` extra)
    agent_vision_models: CsvList = Field(default_factory=list, alias="AGENT_VISION_MODELS")
    #: file bytes in an S3-compatible bucket instead of PostgreSQL (by SHA-256): the endpoint
    #: URL (with GATEWAY_FILES_S3_BUCKET; needs `pip install 'chat-gateway[s3]'`)
    gateway_files_s3_url: str | None = Field(default=None, alias="GATEWAY_FILES_S3_URL")
    #: the bucket's name (with GATEWAY_FILES_S3_URL)
    gateway_files_s3_bucket: str | None = Field(
        default=None, min_length=3, max_length=63, alias="GATEWAY_FILES_S3_BUCKET"
    )
    #: the bucket's access key (with the secret key; unset: boto3's own lookup, e.g. an instance
    #: role)
    gateway_files_s3_access_key: SecretStr | None = Field(
        default=None, alias="GATEWAY_FILES_S3_ACCESS_KEY"
    )
    #: the bucket's secret key
    gateway_files_s3_secret_key: SecretStr | None = Field(
        default=None, alias="GATEWAY_FILES_S3_SECRET_KEY"
    )
    #: the bucket's region
    gateway_files_s3_region: str = Field(
        default="us-east-1", min_length=1, alias="GATEWAY_FILES_S3_REGION"
    )
    #: prefix of the object names (`<prefix><sha256>`)
    gateway_files_s3_prefix: str = Field(
        default="kb/", max_length=200, alias="GATEWAY_FILES_S3_PREFIX"
    )
    #: how long stored data is kept: a settings group (``gateway.core.settings_groups``), read
    #: from these same sources under its own names (``GATEWAY_RETENTION_*``)
    retention: Annotated[RetentionSettings, NoDecode] = Field(default_factory=RetentionSettings)
    ops: Annotated[OpsAccessSettings, NoDecode] = Field(default_factory=OpsAccessSettings)

    @field_validator("gateway_allowed_places", "gateway_answer_all_places")
    @classmethod
    def _check_places(cls, value: list[str]) -> list[str]:
        for place in value:
            parts = place.split(":")
            if len(parts) not in (3, 4) or not all(parts):
                raise ValueError(f"{place!r} is not platform:scope:chat[:thread] (* for any)")
        return value

    @field_validator("gateway_allowed_people")
    @classmethod
    def _check_people(cls, value: list[str]) -> list[str]:
        for person in value:
            platform, _, person_id = person.partition(":")
            if not platform or not person_id:
                raise ValueError(f"{person!r} is not platform:id (* for any platform)")
        return value

    @field_validator("embedding_base_url", "gateway_files_s3_url", "transcription_base_url")
    @classmethod
    def _check_embedding_url(cls, value: str | None) -> str | None:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value or None

    # --- end knowledge base -----------------------------------------------------------

    _split = field_validator(
        "gateway_adapters",
        "gateway_allowed_places",
        "gateway_allowed_people",
        "gateway_answer_all_places",
        "agent_models",
        "agent_context_windows",
        "agent_inline_files",
        "agent_vision_models",
        "agent_fallback_models",
        "gateway_trusted_proxies",
        "gateway_allowed_hosts",
        "gateway_oidc_allowed_domains",
        "gateway_oidc_allowed_groups",
        mode="before",
    )(split_csv)

    @field_validator("gateway_public_url", "gateway_oidc_issuer")
    @classmethod
    def _check_web_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        if value and info.field_name == "gateway_public_url":
            return value.rstrip("/")
        # an issuer is compared exactly with the one in its tokens: some end in a slash
        return value or None

    @field_validator("gateway_oidc_client_id", "gateway_oidc_client_secret")
    @classmethod
    def _empty_is_unset(cls, value: Any) -> Any:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        return value if text else None

    @field_validator("gateway_admin_token")
    @classmethod
    def _empty_token_is_unset(cls, value: SecretStr | None) -> SecretStr | None:
        # `GATEWAY_ADMIN_TOKEN=` in an env file means "no token", as it always did
        return value if value is not None and value.get_secret_value() else None

    @field_validator("database_url")
    @classmethod
    def _check_dsn(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a postgresql:// or postgres:// URL")
        return value or None

    @field_validator("agent")
    @classmethod
    def _check_agent(cls, value: str) -> str:
        if value in ("echo", "openai", "http") or (
            ":" in value and "." not in value.split(":")[1][:1]
        ):
            return value
        raise ValueError("must be echo, openai, http or module:callable")

    @field_validator("agent_http_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value

    @model_validator(mode="after")
    def _contradictions(self) -> Settings:
        check_access(self)
        unknown = sorted(set(self.agent_inline_files) - {"images", "text"})
        if unknown:
            raise ConfigError("AGENT_INLINE_FILES", f"unknown kinds {unknown}: use images, text")
        if self.gateway_files_s3_url and not self.gateway_files_s3_bucket:
            raise ConfigError(
                "GATEWAY_FILES_S3_BUCKET", "required when GATEWAY_FILES_S3_URL is set"
            )
        if self.gateway_files_s3_bucket and not self.gateway_files_s3_url:
            raise ConfigError(
                "GATEWAY_FILES_S3_URL", "required when GATEWAY_FILES_S3_BUCKET is set"
            )
        if bool(self.gateway_files_s3_access_key) != bool(self.gateway_files_s3_secret_key):
            raise ConfigError(
                "GATEWAY_FILES_S3_SECRET_KEY",
                "GATEWAY_FILES_S3_ACCESS_KEY and GATEWAY_FILES_S3_SECRET_KEY go together",
            )
        if self.agent == "http" and not self.agent_http_url:
            raise ConfigError("AGENT_HTTP_URL", "required when AGENT=http")
        if self.agent == "http" and not self.agent_http_secret:
            raise ConfigError("AGENT_HTTP_SECRET", "required when AGENT=http (requests are signed)")
        if self.agent_models and self.agent_model not in self.agent_models:
            raise ConfigError("AGENT_MODEL", "must be one of AGENT_MODELS (it is the default)")
        windows = self.context_windows()  # raises ConfigError on a malformed pair
        for model in self.agent_models or [self.agent_model]:
            window = windows.get(model.lower(), 0) or None
            if window is not None and window < self.agent_max_output_tokens + 256:
                raise ConfigError(
                    "AGENT_CONTEXT_WINDOWS",
                    f"{model}: a window of {window} leaves no room for a prompt next to "
                    f"AGENT_MAX_OUTPUT_TOKENS={self.agent_max_output_tokens}",
                )
        return self

    def context_windows(self) -> dict[str, int]:
        """``AGENT_CONTEXT_WINDOWS`` as {lower-case model name: tokens}."""
        windows: dict[str, int] = {}
        for pair in self.agent_context_windows:
            name, sep, value = pair.rpartition("=")
            if (
                not sep
                or not name.strip()
                or not value.strip().isascii()
                or not value.strip().isdigit()
            ):
                raise ConfigError("AGENT_CONTEXT_WINDOWS", f"{pair!r} is not model=tokens")
            windows[name.strip().lower()] = int(value)
        return windows


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment (and ``.env``); one ``ConfigError`` names every bad one."""
    return parsed(lambda: Settings(**{"_env_file": env_file_path(), **overrides}))


def parsed(build: Callable[[], SettingsT]) -> SettingsT:
    """``build()``, its validation errors translated into one ``ConfigError`` that names
    every bad setting (by its environment name)."""
    try:
        return build()
    except ConfigError:
        raise
    except SettingsError as exc:
        match = re.search(r'field "(\w+)"', str(exc))
        name = match.group(1).upper() if match else "settings"
        raise ConfigError(name, "cannot parse the value") from exc
    except ValidationError as exc:
        found: list[ConfigError] = []
        for error in exc.errors():
            loc = error.get("loc") or ("settings",)
            ctx_error = (error.get("ctx") or {}).get("error")
            if isinstance(ctx_error, ConfigError):
                found.append(ctx_error)
            else:
                found.append(ConfigError(str(loc[0]).upper(), error.get("msg", "invalid value")))
        raise ConfigError.of(found) from exc
