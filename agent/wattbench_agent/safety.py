"""Names that become file names, and URLs that become rows and log lines.

- `file_name(name, suffix)`: a deployment id or config name as one file name inside a folder: a name with a path
  in it (`../../x`, `/abs`) must not write outside the bundle. Plain names (letters, digits, '.', '_', '-') stay
  as they are; anything else is replaced, and a short hash of the original keeps two names apart.
- `redact_url(url)`: a URL with its `user:password@` and secret-looking query values replaced, for what is stored
  or shown (the deployments row, error texts); the request itself still uses the URL as given.

Stdlib only.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_SECRET_PARAM = re.compile(r"(token|secret|password|passwd|api_?key|key|sig|signature|credential|auth)", re.I)


def is_plain_name(name: str) -> bool:
    """Letters, digits, '.', '_' and '-', starting with a letter or digit, at most 64 characters."""
    return isinstance(name, str) and _PLAIN.fullmatch(name) is not None


def file_name(name: str, suffix: str = "") -> str:
    """`name` + `suffix` as a single file name that stays in the folder it is joined to."""
    text = str(name)
    if is_plain_name(text):
        return text + suffix
    cleaned = _UNSAFE.sub("_", text).lstrip("._-")[:48] or "_"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{cleaned}-{digest}{suffix}"


def redact_url(url: str | None) -> str | None:
    """The URL with any `user:password@` replaced by `***@` and secret-looking query values by `***`."""
    if not url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(_SECRET_PARAM.search(k) for k, _ in pairs):
            query = urlencode([(k, "***" if _SECRET_PARAM.search(k) else v) for k, v in pairs])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
