"""Where the load goes: base URL or full endpoint URL, the API it implies, and the server's model list.

`wattbench load` takes either a base URL (`http://host:8000` or `http://host:8000/v1`) or a full endpoint URL
(`.../v1/chat/completions`, `.../v1/completions`), or vLLM bench serve's `--base-url` + `--endpoint`. An endpoint
path decides the API (chat or completions); a base URL leaves it to `--api` (default chat).
"""

from __future__ import annotations

from urllib.parse import urlsplit

ENDPOINT_API = (("/chat/completions", "chat"), ("/completions", "completions"))
# vllm bench serve's server default (--host 127.0.0.1 --port 8000), for a command that names no server
DEFAULT_BASE_URL = "http://127.0.0.1:8000"
# vllm bench serve's --backend values that speak an OpenAI streaming text API (vllm/benchmarks/lib/
# endpoint_request_func.py ASYNC_REQUEST_FUNCS: openai and vllm use async_request_openai_completions, openai-chat
# async_request_openai_chat_completions; older releases also sent sglang, lmdeploy, scalellm and llama.cpp to the
# completions one) -> (the API, the endpoint taken when the URL names none). vLLM's --endpoint default is
# /v1/completions whatever the backend; wattbench takes the backend's own, so --backend openai-chat alone works.
BACKENDS = {
    "openai": ("completions", "/v1/completions"),
    "vllm": ("completions", "/v1/completions"),
    "openai-chat": ("chat", "/v1/chat/completions"),
    "sglang": ("completions", "/v1/completions"),
    "lmdeploy": ("completions", "/v1/completions"),
    "scalellm": ("completions", "/v1/completions"),
    "llama.cpp": ("completions", "/v1/completions"),
}
# vllm bench serve's other backends: APIs wattbench does not measure (no streamed text to time)
OTHER_BACKENDS = (
    "openai-audio",
    "openai-embeddings",
    "openai-embeddings-chat",
    "openai-embeddings-clip",
    "openai-embeddings-vlm2vec",
    "infinity-embeddings",
    "infinity-embeddings-clip",
    "vllm-pooling",
    "vllm-rerank",
    "tgi",
    "tensorrt-llm",
    "deepspeed-mii",
)


class EndpointError(ValueError):
    """The URL, endpoint or model cannot be used; the message says what was given and what was expected."""


def api_of(url: str) -> str | None:
    """'chat' or 'completions' when the URL ends in an OpenAI endpoint path, else None (a base URL)."""
    path = urlsplit(url).path.rstrip("/")
    for suffix, api in ENDPOINT_API:
        if path.endswith(suffix):
            return api
    return None


def base_of(url: str) -> str:
    """The server root of a base or endpoint URL: http://h:8000/v1/chat/completions -> http://h:8000/v1."""
    u = url.rstrip("/")
    for suffix, _api in ENDPOINT_API:
        if u.endswith(suffix):
            return u[: -len(suffix)]
    return u


def join_endpoint(base_url: str, endpoint: str) -> str:
    """vLLM's `--base-url` + `--endpoint` (api_url = base_url + endpoint), without doubling a /v1 both carry."""
    b, e = base_url.rstrip("/"), "/" + endpoint.lstrip("/")
    if b.endswith("/v1") and e.startswith("/v1/"):
        e = e[3:]
    return b + e


def check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EndpointError(
            f"--url {url!r}: expected http(s)://host:port, optionally with /v1 or a full endpoint "
            "path such as /v1/chat/completions"
        )


def resolve_api(url: str, api: str | None) -> str:
    """The API to speak: what the endpoint path says, checked against an explicit `api`; chat for a base URL."""
    implied = api_of(url)
    if implied and api and api != implied:
        raise EndpointError(
            f"--api {api} does not match the endpoint {url} (which is the {implied} API); drop --api or give a base URL"
        )
    return implied or api or "chat"


def models_url(url: str) -> str:
    b = base_of(url)
    return b + "/models" if b.endswith("/v1") else b + "/v1/models"


def server_models(url: str, headers: dict | None = None, timeout_s: float = 10.0) -> list[str]:
    """The model ids the server lists at GET /v1/models. EndpointError with the URL and the answer otherwise.
    Bounded (wattbench_agent.fetch): timeout_s in total, 4 MiB decoded, JSON nesting."""
    from wattbench_agent.fetch import FetchError, get

    where = models_url(url)
    try:
        resp = get(where, headers=headers, timeout_s=timeout_s)
    except FetchError as exc:
        raise EndpointError(f"cannot read the model list: {exc}; check --url, or give --model") from None
    if resp.status != 200:
        raise EndpointError(f"{where} answered HTTP {resp.status}: {resp.text[:300].strip()}; give --model")
    try:
        data = resp.json().get("data") or []
        ids = [str(m["id"]) for m in data if isinstance(m, dict) and m.get("id")]
    except (ValueError, AttributeError, KeyError, TypeError) as exc:
        if "nested deeper" in str(exc):
            raise EndpointError(f"{exc}; give --model") from None
        raise EndpointError(
            f"{where} did not answer an OpenAI model list ({resp.text[:200].strip()!r}); give --model"
        ) from None
    return ids


def default_model(url: str, headers: dict | None = None) -> str:
    """The server's only model; EndpointError naming them when there are none or several."""
    ids = server_models(url, headers)
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise EndpointError(f"{models_url(url)} lists no model; give --model")
    raise EndpointError(f"{models_url(url)} lists {len(ids)} models ({', '.join(ids[:8])}); pick one with --model")


def backend_api(backend: str) -> tuple[str, str]:
    """(API, default endpoint) of a vllm bench serve --backend value; EndpointError naming the accepted ones."""
    if backend in BACKENDS:
        return BACKENDS[backend]
    if backend in OTHER_BACKENDS:
        raise EndpointError(
            f"--backend {backend}: vllm bench serve's backend for a non-streaming or non-text API; wattbench "
            f"measures streamed text: use one of {', '.join(BACKENDS)}"
        )
    raise EndpointError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)} (vllm bench serve's values)")
