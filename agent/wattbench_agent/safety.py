"""Names that become file names, and URLs that become rows and log lines.

- `file_name(name, suffix)`: a deployment id or config name as one file name inside a folder: a name with a path
  in it (`../../x`, `/abs`) must not write outside the bundle. Plain names (letters, digits, '.', '_', '-') stay
  as they are; anything else is replaced, and a short hash of the original keeps two names apart.
- `plain_name_problem(name)`: why a name that must be a file name as it is (a plan's name, a run id) is not one.
- `redact_url(url)`: a URL with its `user:password@` and secret-looking query values replaced, for what is stored
  or shown (the deployments row, error texts); the request itself still uses the URL as given.
- `is_secret_name(name)`, `is_secret(name, value)`, `mask_value(name, value)`, `mask_env(env)`, `redact_text(text)`,
  `redact_argv(argv)`: what an environment, a header map, a command line or any text may show. By name: a name one
  of whose words (split at '_', '-', '.', and lower-to-upper case changes) ends in TOKEN, KEY, SECRET(S), PASS
  (PASSWORD(S), PASSWD, PASSPHRASE), AUTH (AUTHORIZATION), CREDENTIAL(S), COOKIE(S), PRIVATE or SIG(NATURE), or is
  CRED(S), PWD, PAT or DSN: `WANDB_KEY`, `AUTH_HEADER`, `MY_PASS`, `apiKey`, `Set-Cookie`, `DB_PWD`, `GITHUB_PAT`,
  `SENTRY_DSN` (not `TOKENIZERS_PARALLELISM`, `PATH` or `COMPAT`, whose words end otherwise, nor `PWD` alone, the
  working directory). A word ending in TOKENS or KEYS names a secret unless its value is a count or a switch:
  `API_TOKENS` is masked, `MAX_TOKENS: 64` and `SKIP_SPECIAL_TOKENS: true` are kept. By value, whatever the name: a
  URL's `user:password@` (`postgres://u:p@host/db` -> `postgres://***@host/db`), secret-named query values, a value
  that is an HTTP authorization (`Bearer ...`, `Basic ...`), a token in a known form (`sk-...`, `ghp_...`,
  `github_pat_...`, `hf_...`), and in text an `Authorization:` / `Cookie:` header, a `Bearer` token, `NAME=value`,
  `NAME: value`, `"NAME": "value"` and `--name value` with a secret NAME.

Only what is written or shown is masked: the values sent to a server or an engine are the ones given.

Stdlib only.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MASK = "***"
_SECRET_WORD = re.compile(
    r"(TOKEN|KEY|SECRETS?|PASS|PASSWD|PASSWORDS?|PASSPHRASE|AUTH|AUTHORIZATION|CREDENTIALS?|COOKIES?|PRIVATE|SIG"
    r"|SIGNATURE)$"
)
# words too short to be read as endings (PATH, COMPAT, SACRED): secret as whole words only
_SECRET_WHOLE = frozenset({"CRED", "CREDS", "PWD", "PAT", "DSN"})
# plural endings that also name counts (MAX_TOKENS, NUM_KEYS): a secret unless the value is a count or a switch
_SECRET_PLURAL = re.compile(r"(TOKENS|KEYS)$")
_COUNT_OR_SWITCH = re.compile(
    r"\s*(-?[0-9][0-9_]*(\.[0-9]+)?([eE][+-]?[0-9]+)?|true|false|yes|no|on|off|none|null)?\s*", re.I
)
# tokens in the forms their issuers give them, wherever they appear (OpenAI/Anthropic, GitHub, Hugging Face)
_TOKEN_VALUE = re.compile(
    r"\b(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|hf_[A-Za-z0-9]{20,})"
)
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# credentials in text: a URL's userinfo, an authorization scheme's parameter, a header line that carries them
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s@]+@")
_SCHEME_VALUE = re.compile(r"(?i)^(\s*(?:bearer|basic|digest|negotiate|token|apikey)\s+)\S.*$", re.S)
_BEARER_IN_TEXT = re.compile(r"\b(Bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
_HEADER_IN_TEXT = re.compile(r"(?im)\b((?:proxy-)?(?:authorization|cookie|set-cookie|x-api-key)\s*:\s*)\S.*$")
_URL_IN_TEXT = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+")
_ASSIGNMENT = re.compile(r"(?<![\w-])([A-Za-z_][A-Za-z0-9_.-]*)=([^\s&'\"]+)")
# `NAME: value`, `"NAME": "value"`, `'NAME': 'value'` (YAML, JSON, a printed dict) and `--name value` / `--name=value`
# (a quoted name may meet its colon and value without a space, as JSON writes it; a bare one is followed by a space,
# as YAML writes it, so that `expected KEY:MILLISECONDS` in a message is left alone)
_PAIR_IN_TEXT = re.compile(
    r"""(?<![\w-])(?:(["'])([A-Za-z_][A-Za-z0-9_.-]*)\1(\s*:\s*)|()([A-Za-z_][A-Za-z0-9_.-]*)(\s*:[ \t]+))"""
    r"""("[^"\n]*"|'[^'\n]*'|[^\s,;{}\[\]]+)"""
)
_FLAG_IN_TEXT = re.compile(r"""(?<![\w-])(--?[A-Za-z][A-Za-z0-9_.-]*)(=|[ \t]+)(?!-)("[^"\n]*"|'[^'\n]*'|[^\s'"]+)""")


def is_plain_name(name: str, max_len: int = 64) -> bool:
    """Letters, digits, '.', '_' and '-', starting with a letter or digit, at most `max_len` characters."""
    return isinstance(name, str) and len(name) <= max_len and _PLAIN.fullmatch(name) is not None


def plain_name_problem(name: object, max_len: int = 64) -> str | None:
    """Why `name` cannot stand as a file name of its own (one line, the name cut to 80 characters), or None. A plan's
    name or a run id becomes a folder (`bundle-RUN`): `../../x` would be written outside it, and 5,000 characters is
    past what a file system takes."""
    if is_plain_name(name, max_len):  # type: ignore[arg-type]
        return None
    shown = repr(name)[:80] + (f"... ({len(name):,} characters)" if isinstance(name, str) and len(name) > 78 else "")
    return (
        f"{shown} is not a plain name; expected letters, digits, '.', '_' or '-', starting with a letter or digit, at "
        f"most {max_len} characters (it names files and folders)"
    )


def file_name(name: str, suffix: str = "") -> str:
    """`name` + `suffix` as a single file name that stays in the folder it is joined to."""
    text = str(name)
    if is_plain_name(text):
        return text + suffix
    cleaned = _UNSAFE.sub("_", text).lstrip("._-")[:48] or "_"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{cleaned}-{digest}{suffix}"


def _words(name: str) -> list[str]:
    return [w.upper() for w in _WORDS.findall(name)]


def is_secret_name(name: object) -> bool:
    """Whether a variable, header, option or query parameter of this name holds a secret whatever its value (module
    docstring); a name ending in TOKENS or KEYS is judged with its value (`is_secret`)."""
    if not isinstance(name, str):
        return False
    words = _words(name)
    if words == ["PWD"]:  # the shell's working directory
        return False
    return any(_SECRET_WORD.search(w) or w in _SECRET_WHOLE for w in words)


def is_secret(name: object, value: object) -> bool:
    """Whether `value` under `name` is a secret: a secret name, or a plural one (API_TOKENS) whose value is not a
    count or a switch (MAX_TOKENS: 64)."""
    if is_secret_name(name):
        return True
    if not isinstance(name, str) or not any(_SECRET_PLURAL.search(w) for w in _words(name)):
        return False
    if isinstance(value, bool | int | float) or value is None:
        return False
    return not (isinstance(value, str) and _COUNT_OR_SWITCH.fullmatch(value))


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
        if any(is_secret(k, v) for k, v in pairs):
            query = urlencode([(k, MASK if is_secret(k, v) else v) for k, v in pairs])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _masked_quoted(value: str) -> str:
    """MASK in the quotes `value` came in, if any."""
    return value[0] + MASK + value[0] if value[:1] in ("'", '"') and len(value) > 1 else MASK


def _unquoted(value: str) -> str:
    return value[1:-1] if value[:1] in ("'", '"') and len(value) > 1 else value


def _masked_pair(m: re.Match) -> str:
    quote, name, colon = (m.group(1), m.group(2), m.group(3)) if m.group(2) else ("", m.group(5), m.group(6))
    value = m.group(7)
    # `KeyError: 'choices'` names an exception, not a key
    if _unquoted(value) == MASK or name.endswith(("Error", "Exception", "Warning")):
        return m.group(0)
    if not is_secret(name, _unquoted(value)):
        return m.group(0)
    return quote + name + quote + colon + _masked_quoted(value)


def redact_text(text: str | None) -> str | None:
    """Free text (a log line, an error message, a value) with the credentials it carries masked: URLs' userinfo and
    secret query values, `Bearer ...`-style credentials, `Authorization:`/`Cookie:` header lines, tokens in their
    issuers' forms, and `NAME=value`, `NAME: value`, `"NAME": "value"`, `--name value` where NAME is a secret."""
    if not text or not isinstance(text, str):
        return text
    out = _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)) or "", text)
    out = _USERINFO.sub(lambda m: m.group(1) + MASK + "@", out)  # URLs the pattern above did not take whole
    out = _HEADER_IN_TEXT.sub(lambda m: m.group(1) + MASK, out)
    out = _BEARER_IN_TEXT.sub(lambda m: m.group(1) + MASK, out)
    out = _TOKEN_VALUE.sub(MASK, out)
    out = _PAIR_IN_TEXT.sub(_masked_pair, out)
    out = _FLAG_IN_TEXT.sub(
        lambda m: (
            m.group(1) + m.group(2) + _masked_quoted(m.group(3))
            if is_secret(m.group(1).lstrip("-"), _unquoted(m.group(3)))
            else m.group(0)
        ),
        out,
    )
    return _ASSIGNMENT.sub(lambda m: m.group(1) + "=" + MASK if is_secret(m.group(1), m.group(2)) else m.group(0), out)


def mask_value(name: object, value: object) -> object:
    """`value` as it may be shown under `name`: all of it masked for a secret name, else its text redacted."""
    if is_secret(name, value):
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
            if is_secret(k, v) and v not in (None, "", MASK):
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
    flag_before = None  # the option whose value this argument may be
    for arg in argv:
        arg = str(arg)
        if flag_before is not None:
            name, flag_before = flag_before, None
            if is_secret(name, arg):
                out.append(MASK)
                continue
        if arg.startswith("-") and not arg.startswith("---"):
            flag, eq, value = arg.partition("=")
            name = flag.lstrip("-")
            if eq and is_secret(name, value):
                out.append(flag + "=" + MASK)
                continue
            if not eq:
                flag_before = name
                out.append(redact_text(arg) or arg)
                continue
        out.append(redact_text(arg) or arg)
    return out
