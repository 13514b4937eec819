"""Names that become file names, and URLs that become rows and log lines.

- `file_name(name, suffix)`: a deployment id or config name as one file name inside a folder: a name with a path
  in it (`../../x`, `/abs`) must not write outside the bundle. Plain names (letters, digits, '.', '_', '-') stay
  as they are; anything else is replaced, and a short hash of the original keeps two names apart.
- `redact_url(url)`: a URL with its `user:password@` and secret-looking query values replaced, for what is stored
  or shown (the deployments row, error texts); the request itself still uses the URL as given.
- `is_secret_name(name)`, `mask_value(name, value)`, `mask_env(env)`, `redact_text(text)`, `redact_argv(argv)`:
  what an environment, a header map, a command line or any text may show. By name: a name one of whose words
  (split at '_', '-', '.', and lower-to-upper case changes) ends in TOKEN, KEY, SECRET, PASS (PASSWORD, PASSWD,
  PASSPHRASE), AUTH (AUTHORIZATION), CREDENTIAL(S), COOKIE(S), PRIVATE or SIG(NATURE): `WANDB_KEY`, `AUTH_HEADER`,
  `MY_PASS`, `apiKey`, `Set-Cookie` (not `MAX_TOKENS` or `TOKENIZERS_PARALLELISM`, whose words end otherwise). By
  value, whatever the name: a URL's `user:password@` (`postgres://u:p@host/db` -> `postgres://***@host/db`),
  secret-named query values, a value that is an HTTP authorization (`Bearer ...`, `Basic ...`), and in text an
  `Authorization:` / `Cookie:` header, a `Bearer` token and `NAME=value` with a secret NAME.

Stdlib only.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MASK = "***"
_SECRET_WORD = re.compile(
    r"(TOKEN|KEY|SECRET|PASS|PASSWD|PASSWORD|PASSPHRASE|AUTH|AUTHORIZATION|CREDENTIALS?|COOKIES?|PRIVATE|SIG|SIGNATURE)$"
)
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# credentials in text: a URL's userinfo, an authorization scheme's parameter, a header line that carries them
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s@]+@")
_SCHEME_VALUE = re.compile(r"(?i)^(\s*(?:bearer|basic|digest|negotiate|token|apikey)\s+)\S.*$", re.S)
_BEARER_IN_TEXT = re.compile(r"\b(Bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_HEADER_IN_TEXT = re.compile(r"(?im)\b((?:proxy-)?(?:authorization|cookie|set-cookie|x-api-key)\s*:\s*)\S.*$")
_URL_IN_TEXT = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+")
_ASSIGNMENT = re.compile(r"(?<![\w-])([A-Za-z_][A-Za-z0-9_.-]*)=([^\s&'\"]+)")


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


def is_secret_name(name: object) -> bool:
    """Whether a variable, header, option or query parameter of this name holds a secret (module docstring)."""
    if not isinstance(name, str):
        return False
    return any(_SECRET_WORD.search(word.upper()) for word in _WORDS.findall(name))


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
        netloc = MASK + "@" + netloc.rsplit("@", 1)[1]
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(is_secret_name(k) for k, _ in pairs):
            query = urlencode([(k, MASK if is_secret_name(k) else v) for k, v in pairs])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_text(text: str | None) -> str | None:
    """Free text (a log line, an error message, a value) with the credentials it carries masked: URLs' userinfo and
    secret query values, `Bearer ...`-style credentials, `Authorization:`/`Cookie:` header lines, and
    `NAME=value` where NAME is a secret name."""
    if not text or not isinstance(text, str):
        return text
    out = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)) or "", text)
    out = _USERINFO.sub(lambda m: m.group(1) + MASK + "@", out)  # URLs the pattern above did not take whole
    out = _HEADER_IN_TEXT.sub(lambda m: m.group(1) + MASK, out)
    out = _BEARER_IN_TEXT.sub(lambda m: m.group(1) + MASK, out)
    return _ASSIGNMENT.sub(lambda m: m.group(1) + "=" + MASK if is_secret_name(m.group(1)) else m.group(0), out)


def mask_value(name: object, value: object) -> object:
    """`value` as it may be shown under `name`: all of it masked for a secret name, else its text redacted."""
    if is_secret_name(name):
        return MASK
    if isinstance(value, str):
        scheme = _SCHEME_VALUE.match(value)  # an Authorization header's value under any name
        return scheme.group(1) + MASK if scheme else redact_text(value)
    return mask_map(value) if isinstance(value, dict) else value


def mask_map(values: object) -> object:
    """A mapping (env, headers, options, metadata; nested ones too) as it may be shown: `mask_value` of each."""
    if isinstance(values, dict):
        return {k: mask_value(k, v) for k, v in values.items()}
    if isinstance(values, (list, tuple)):
        return [mask_map(v) if isinstance(v, (dict, list, tuple)) else redact_text(v) for v in values]
    return values


def mask_env(env: dict[str, str]) -> dict[str, str]:
    """An environment map as it may be shown, sorted by name (`mask_value` of each)."""
    return {k: mask_value(k, v) for k, v in sorted(env.items())}


def secret_paths(value: object, path: str = "") -> list[str]:
    """Where in a JSON-like value something would be masked (`a.b[0].c`): what a file holding it exposes."""
    if isinstance(value, dict):
        out = []
        for k, v in value.items():
            here = f"{path}.{k}" if path else str(k)
            if is_secret_name(k) and v not in (None, "", MASK):
                out.append(here)
            else:
                out += secret_paths(v, here)
        return out
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in secret_paths(v, f"{path}[{i}]")]
    if isinstance(value, str) and mask_value("", value) != value:
        return [path]
    return []


def redact_argv(argv: list[str]) -> list[str]:
    """A command line as it may be shown: the value after a secret-named option (`--api-key X`, `--api-key=X`,
    `-H 'Authorization: ...'`) masked, and every argument's text redacted."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        arg = str(arg)
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        if arg.startswith("-") and not arg.startswith("---"):
            flag, eq, _ = arg.partition("=")
            if is_secret_name(flag.lstrip("-")):
                if eq:
                    out.append(flag + "=" + MASK)
                else:
                    out.append(arg)
                    hide_next = True
                continue
        out.append(redact_text(arg) or arg)
    return out
