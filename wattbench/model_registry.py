"""Models as Dagster partitions, and the Hugging Face Hub's model list.

Model ids become keys of the dynamic partition `models`. A Hub id (`meta-llama/Llama-3.1-8B`) holds a '/', which
partition keys in URLs of the UI do not like, so '/' is written '--' (`meta-llama--Llama-3.1-8B`); the Hub does not
allow '--' in repo ids, so the key turns back into the id. Characters a multi-partition key cannot hold
(`| , [ ]`) and whitespace become '_' (those do not turn back; such ids are not Hub ids).

`HubClient.list_models` is one page-walking GET of `{base}/api/models?author=ORG&sort=createdAt&direction=-1&limit=N`
(plus `pipeline_tag`, `library` and `filter` parameters); it raises `HubUnavailable` with how long to back off on
429 (Retry-After), 5xx, timeouts and connection errors. No Dagster here: the sensor (pipelines/sensors.py) decides
what is new.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

_UNSAFE = re.compile(r"[|,\[\]\s]+")


def partition_key_for(model_id: str) -> str:
    """The `models` partition key of a model id (a Hub id, a short name like llama-3-70b, or a path)."""
    key = _UNSAFE.sub("_", model_id.strip()).replace("/", "--")
    if not key or "..." in key:
        raise ValueError(f"model id {model_id!r} does not make a partition key")
    return key


def model_id_for(key: str) -> str:
    """The model id a `models` partition key stands for (inverse of partition_key_for for Hub ids and names)."""
    return key.replace("--", "/")


@dataclass(frozen=True)
class HubModel:
    id: str
    created_at: str  # ISO 8601 as the Hub writes it, e.g. 2025-04-05T18:23:12.000Z
    pipeline_tag: str | None = None
    tags: tuple[str, ...] = ()
    library: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_api(cls, item: dict[str, Any]) -> HubModel:
        model_id = item.get("id") or item.get("modelId")
        if not model_id or not item.get("createdAt"):
            raise ValueError(f"Hub model entry without id/createdAt: {item!r:.200}")
        return cls(
            id=str(model_id),
            created_at=str(item["createdAt"]),
            pipeline_tag=item.get("pipeline_tag"),
            tags=tuple(item.get("tags") or ()),
            library=item.get("library_name"),
            raw=item,
        )

    @property
    def created(self) -> datetime:
        return parse_time(self.created_at)

    @property
    def org(self) -> str:
        return self.id.split("/", 1)[0] if "/" in self.id else ""


def parse_time(text: str) -> datetime:
    out = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return out if out.tzinfo else out.replace(tzinfo=UTC)


class HubUnavailable(RuntimeError):
    """The Hub did not answer usefully; `retry_after_s` is how long to wait (None: the caller's backoff)."""

    def __init__(self, message: str, retry_after_s: float | None = None, status: int | None = None):
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.status = status


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def same_origin(base_url: str, url: str) -> bool:
    """Whether `url` is on `base_url`'s origin (scheme, host and port, RFC 6454): the only place the token goes."""
    try:
        a, b = httpx.URL(base_url), httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return False
    default = {"http": 80, "https": 443}
    return (
        bool(b.scheme)
        and a.scheme == b.scheme
        and a.host == b.host
        and (a.port or default.get(a.scheme)) == (b.port or default.get(b.scheme))
    )


@dataclass
class HubClient:
    base_url: str = "https://huggingface.co"
    token: str | None = None
    timeout_s: float = 10.0
    max_pages: int = 3
    notes: list[str] = field(default_factory=list)  # what the last list_models left out and why (shown by the sensor)

    def _params(
        self, org: str, limit: int, pipeline_tag: str | None, library: str | None, filters: list[str]
    ) -> list[tuple[str, str]]:
        params = [("author", org), ("sort", "createdAt"), ("direction", "-1"), ("limit", str(limit))]
        if pipeline_tag:
            params.append(("pipeline_tag", pipeline_tag))
        if library:
            params.append(("library", library))
        params += [("filter", f) for f in filters]
        return params

    def list_models(
        self,
        org: str,
        *,
        limit: int = 20,
        pipeline_tag: str | None = None,
        library: str | None = None,
        filters: list[str] | None = None,
        stop_at: datetime | None = None,
    ) -> list[HubModel]:
        """Newest first. Follows the Link rel="next" pages while every model on the page is newer than `stop_at`
        (so a burst of releases larger than `limit` is not missed), at most `max_pages` pages. A next link to
        another origin (another host or port, or plain http) is not followed: the token would go with it. httpx
        drops the token itself on a redirect to another origin."""
        self.notes = []
        headers = {"Accept": "application/json", "User-Agent": "wattbench-model-sensor"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        url: str | None = f"{self.base_url.rstrip('/')}/api/models"
        params: list[tuple[str, str]] | None = self._params(org, limit, pipeline_tag, library, list(filters or []))
        out: list[HubModel] = []
        with httpx.Client(timeout=self.timeout_s, headers=headers, follow_redirects=True) as client:
            for _ in range(self.max_pages):
                try:
                    response = client.get(url, params=params)
                except httpx.TimeoutException as exc:
                    raise HubUnavailable(f"Hub timed out after {self.timeout_s:g} s ({type(exc).__name__})") from exc
                except httpx.TransportError as exc:
                    raise HubUnavailable(f"Hub unreachable: {type(exc).__name__}: {exc}") from exc
                if response.status_code == 429:
                    raise HubUnavailable(
                        "Hub rate limit (429)", retry_after_seconds(response.headers.get("Retry-After")), status=429
                    )
                if response.status_code >= 500:
                    raise HubUnavailable(
                        f"Hub server error {response.status_code}",
                        retry_after_seconds(response.headers.get("Retry-After")),
                        status=response.status_code,
                    )
                if response.status_code != 200:
                    raise HubUnavailable(
                        f"Hub answered {response.status_code} for {response.request.url}", status=response.status_code
                    )
                try:
                    items = response.json()
                except ValueError as exc:
                    raise HubUnavailable("Hub answered 200 with a body that is not JSON") from exc
                if not isinstance(items, list):
                    raise HubUnavailable(f"Hub answered {type(items).__name__}, expected a JSON list of models")
                page = [
                    HubModel.from_api(i)
                    for i in items
                    if isinstance(i, dict) and (i.get("id") or i.get("modelId")) and i.get("createdAt")
                ]
                out += page
                next_url = response.links.get("next", {}).get("url")
                if not next_url or not page or stop_at is None or min(m.created for m in page) <= stop_at:
                    break
                next_url = str(response.url.join(next_url))  # a relative link is on this origin
                if not same_origin(self.base_url, next_url):
                    self.notes.append(
                        f"the Hub's next page link {next_url[:200]} is not on {self.base_url}; not "
                        "followed (the token goes to the Hub's own origin only), so releases beyond "
                        "this page are not listed"
                    )
                    break
                url, params = next_url, None
        return out
