"""The few Mattermost REST v4 calls the adapter needs, on ``httpx.AsyncClient``.

Not mattermostdriver: its REST client is synchronous ``requests`` (platforms.md §3.5), and
mattermostautodriver's generated client would add a layer for ~6 calls. Errors come back as
``MattermostApiError`` carrying the server's error ``id`` and any ``Retry-After``.
"""

from __future__ import annotations

import ssl
from typing import Any

import httpx

from gateway.core.attachments import download
from gateway.core.errors import GatewayError
from gateway.core.retry_after import parse_retry_after

#: most posts a since-query answers (server ``GetPostsSince``: ``LIMIT 1000``)
SINCE_LIMIT = 1000
#: the page form's largest ``per_page`` (the server caps larger values to it)
PER_PAGE_MAX = 200


class MattermostApiError(GatewayError):
    """A non-2xx answer. ``error_id`` is the server's i18n id
    (``api.post.create_post.root_id.app_error``...), ``retry_after`` seconds for a 429."""

    def __init__(
        self, status: int, error_id: str, message: str, *, retry_after: float | None = None
    ) -> None:
        super().__init__(f"{status} {error_id}: {message}")
        self.status = status
        self.error_id = error_id
        self.message = message
        self.retry_after = retry_after


def _retry_after(response: httpx.Response) -> float | None:
    # Mattermost's rate limiter sets Retry-After and X-RateLimit-Reset, both in seconds
    # (server/channels/app/ratelimit.go; its docs call Reset an epoch, the code does not).
    for header in ("Retry-After", "X-RateLimit-Reset"):
        seconds = parse_retry_after(response.headers.get(header))
        if seconds is not None:
            return seconds
    return None


def error_from_response(response: httpx.Response) -> MattermostApiError:
    """Every non-2xx answer becomes one ``MattermostApiError``, here and only here."""
    error_id = f"http.{response.status_code}"
    message = response.reason_phrase or ""
    try:
        body = response.json()
    except ValueError:
        # e.g. the rate limiter's plain-text "limit exceeded"
        body = None
        text = response.text.strip()
        if text:
            message = text[:200]
    if isinstance(body, dict):
        if isinstance(body.get("id"), str) and body["id"]:
            error_id = body["id"]
        if isinstance(body.get("message"), str) and body["message"]:
            message = body["message"]
    return MattermostApiError(
        response.status_code, error_id, message, retry_after=_retry_after(response)
    )


class MattermostApi:
    """REST v4 client bound to one server and token. Construction does no I/O."""

    def __init__(
        self,
        *,
        api_base: str,
        token: str,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 10.0,
        trust_env: bool = True,
    ) -> None:
        self._client = httpx.AsyncClient(
            base_url=api_base.rstrip("/") + "/",
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            # certificate verification always on; a private CA comes in via ssl_context
            # (or OpenSSL's SSL_CERT_FILE). httpx does not retry requests by itself, so a
            # retried POST only ever comes from the core's delivery policy.
            verify=ssl_context if ssl_context is not None else True,
            trust_env=trust_env,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def download(self, file_id: str, *, max_bytes: int, name: str | None) -> bytes:
        """``GET /api/v4/files/{id}`` (knowledge base), at most ``max_bytes``."""
        return await download(self._client, f"files/{file_id}", max_bytes=max_bytes, name=name)

    async def request(
        self, method: str, path: str, *, json: Any = None, params: dict[str, str] | None = None
    ) -> Any:
        response = await self._client.request(method, path.lstrip("/"), json=json, params=params)
        if response.status_code >= 400:
            raise error_from_response(response)
        if not response.content:
            return None
        return response.json()

    async def get_me(self) -> dict[str, Any]:
        result = await self.request("GET", "users/me")
        return result if isinstance(result, dict) else {}

    async def my_teams(self) -> list[dict[str, Any]]:
        return _dicts(await self.request("GET", "users/me/teams"))

    async def my_team_channels(self, team_id: str) -> list[dict[str, Any]]:
        """Channels of ``team_id`` we are a member of; real servers include our DMs and
        group DMs here too (their team id is empty)."""
        return _dicts(await self.request("GET", f"users/me/teams/{team_id}/channels"))

    async def my_channels(self) -> list[dict[str, Any]]:
        """All our channels across teams, DMs and GMs included (servers >= 6.1)."""
        return _dicts(await self.request("GET", "users/me/channels"))

    async def channel(self, channel_id: str) -> dict[str, Any]:
        result = await self.request("GET", f"channels/{channel_id}")
        return result if isinstance(result, dict) else {}

    async def posts_since(self, channel_id: str, since: int) -> list[dict[str, Any]]:
        """Posts of a channel modified after ``since`` (ms): ``UpdateAt > since``, plus the
        roots of the threads they belong to (server ``GetPostsSince``). At most
        ``SINCE_LIMIT`` of the former, and which ones the server picks is not defined: a full
        answer calls for ``posts_page``. ``since`` is at least 1 (0 selects the page form)."""
        result = await self.request(
            "GET", f"channels/{channel_id}/posts", params={"since": str(max(since, 1))}
        )
        posts = result.get("posts") if isinstance(result, dict) else None
        if not isinstance(posts, dict):
            return []
        return [p for p in posts.values() if isinstance(p, dict)]

    async def posts_page(
        self, channel_id: str, page: int, per_page: int = PER_PAGE_MAX
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Page ``page`` of a channel's posts, newest first by ``create_at``, deleted ones
        left out (server ``GetPostsPage``; ``per_page`` at most ``PER_PAGE_MAX``). Returns
        the page's posts in that order and, apart, the thread roots the server adds."""
        result = await self.request(
            "GET",
            f"channels/{channel_id}/posts",
            params={"page": str(page), "per_page": str(per_page)},
        )
        if not isinstance(result, dict) or not isinstance(result.get("posts"), dict):
            return [], []
        posts: dict[str, Any] = result["posts"]
        order = result.get("order")
        ids = (
            dict.fromkeys(i for i in order if isinstance(i, str)) if isinstance(order, list) else {}
        )
        listed = [posts[i] for i in ids if isinstance(posts.get(i), dict)]
        extra = [p for i, p in posts.items() if i not in ids and isinstance(p, dict)]
        return listed, extra

    async def upload_file(self, channel_id: str, filename: str, data: bytes) -> str:
        """POST /files with the bytes as the body (channel_id and filename in the query, the
        non-multipart form of the endpoint); returns the new file's id for a post's
        ``file_ids``."""
        response = await self._client.post(
            "files", params={"channel_id": channel_id, "filename": filename}, content=data
        )
        if response.status_code >= 400:
            raise error_from_response(response)
        infos = _dicts(response.json().get("file_infos"))
        file_id = infos[0].get("id") if infos else None
        if not isinstance(file_id, str):
            raise ValueError("upload answered without a file id")
        return file_id

    async def create_post(self, body: dict[str, Any]) -> dict[str, Any]:
        result = await self.request("POST", "posts", json=body)
        return result if isinstance(result, dict) else {}

    async def patch_post(
        self, post_id: str, message: str, *, props: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """``props``, when given, replaces the post's props (PatchPost semantics)."""
        body: dict[str, Any] = {"message": message}
        if props is not None:
            body["props"] = props
        result = await self.request("PUT", f"posts/{post_id}/patch", json=body)
        return result if isinstance(result, dict) else {}

    async def delete_post(self, post_id: str) -> None:
        await self.request("DELETE", f"posts/{post_id}")


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []
