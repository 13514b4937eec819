"""What every dataset reader shares (datasets.py, hf_datasets.py): the entry a dataset gives, its one-line error,
reading a file's text, JSON and JSON Lines, and ShareGPT's format. Stdlib only."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class DatasetError(ValueError):
    """A dataset cannot be read: one line naming the file (and line) and what was expected."""


@dataclass(frozen=True)
class Entry:
    prompt: str | None = None  # the text to send; None: wattbench makes a prompt of `input_tokens`
    input_tokens: int | None = None  # a made prompt's length (burstgpt, timed_trace)
    output_tokens: int | None = None  # the dataset's own output length (None: estimated from `reply`, or the spec's)
    reply: str | None = None  # the dataset's reply text, for its length (ShareGPT-like data)
    blocks: tuple = ()  # timed_trace hash ids: blocks of tokens shared by every entry naming them
    turns: tuple[str, ...] = ()  # a conversation's user turns (prompt = the first)
    delays_s: tuple[float, ...] = ()  # think time before each later turn, seconds


def open_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DatasetError(f"{path}: a folder, expected a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot be read ({exc})") from None


def records(path: Path, wrapped_in: tuple[str, ...] = ("data", "rows")) -> list[Any]:
    """A JSON array / object (its first non-empty key of `wrapped_in`, else the object itself) or JSON Lines, by
    content: one JSON value per line when the whole is not."""
    text = open_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return [value for _, value in _json_lines(path, text)]
    if isinstance(data, dict):
        data = next((data[k] for k in wrapped_in if data.get(k)), [data])
    return data if isinstance(data, list) else [data]


def lines_json(path: Path) -> list[tuple[int, Any]]:
    """(line number, value) of a JSON Lines file."""
    return _json_lines(path, open_text(path), "; expected JSON Lines")


def _json_lines(path: Path, text: str, expected: str = "") -> list[tuple[int, Any]]:
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                out.append((i, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{i}: not valid JSON ({exc.msg}){expected}") from None
    return out


def need(path: Path | None, name: str) -> Path:
    if path is None:
        raise DatasetError(f"--dataset-name {name} needs --dataset-path")
    if not path.exists():
        raise DatasetError(f"{path}: no such file or folder (--dataset-name {name} --dataset-path)")
    return path


def load_sharegpt(path: str | Path) -> list[tuple[str, str | None]]:
    """(first user turn, first assistant reply or None) pairs from a ShareGPT-format JSON or JSONL file
    ({"conversations": [{"from": "human"|"gpt", "value": ...}]} or {"messages": [{"role", "content"}]})."""
    p = Path(path)
    data = records(p, wrapped_in=("data",))
    pairs: list[tuple[str, str | None]] = []
    for item in data:
        if not isinstance(item, dict):
            continue
        turns = item.get("conversations") or item.get("conversation") or item.get("messages") or []
        user = reply = None
        for t in turns:
            if not isinstance(t, dict):
                continue
            who = t.get("from", t.get("role"))
            val = t.get("value", t.get("content"))
            if not isinstance(val, str):
                continue
            if user is None and who in ("human", "user"):
                user = val
            elif user is not None and who in ("gpt", "assistant", "chatgpt", "bard", "model"):
                reply = val
                break
        if user:
            pairs.append((user, reply))
    if not pairs:
        raise DatasetError(f"{p}: no conversations with a user turn (ShareGPT format expected)")
    return pairs
