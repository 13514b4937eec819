"""`--dataset-name hf`: vLLM 0.25's Hugging Face text datasets, read from local files only (no hub at run time).

`--hf-name` (else `--dataset-path`) names the dataset, which picks how a row becomes a prompt, as vLLM's classes in
vllm/benchmarks/datasets/datasets.py do (InstructCoder, MT-Bench, HumanEval, GSM8K, Blazedit, AIMO, Zeta, MLPerf,
ShareGPT_Vicuna). `--dataset-path` is a local file (.parquet, .jsonl, .json, .arrow) or folder of them; given the
hub name itself, the local Hugging Face caches are searched ($HF_HUB_CACHE or $HF_HOME/hub, and the `datasets` cache
$HF_DATASETS_CACHE). `--hf-split` / `--hf-subset` pick files by name (vLLM's default split per dataset). Parquet and
arrow need pyarrow (the `datasets` package brings it); JSON needs nothing.

Multimodal and tool-calling datasets are refused by name: wattbench sends text prompts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .dataset_files import DatasetError, Entry, records

_INSTRUCT_CODER = "{input}\n\n{instruction} Just output the code, do not include any explanation."
_BLAZEDIT = (
    "Given a code file, please apply the change requests and generate the new file.\n\nOriginal file:\n```python\n"
    '{code}\n```\n\nChange request:\n{change_request}\n\nPlease generate the new code file in the "New file" '
    "section below."
)
_ZETA = (
    "### Instruction:\nYou are a code completion assistant and your task is to analyze user edits and then rewrite an "
    "excerpt that the user provides, suggesting the appropriate edits within the excerpt, taking into account the "
    "cursor location.\n\n### User Edits:\n\n{events}\n\n### User Excerpt:\n\n{input}\n\n### Response:\n\n"
)


def _zeta(row: dict) -> tuple[str, str]:
    out = str(row["output"])
    start = out.find("<|editable_region_start|>")
    return _ZETA.format(events=row["events"], input=row["input"]), out[start:]


@dataclass(frozen=True)
class HFText:
    """How one of vLLM's text datasets turns a row into (prompt, reply or None), and its defaults."""

    names: tuple[str, ...]
    row: Callable[[dict], tuple[str, str | None]]
    split: str | None = "train"
    subset: str | None = None
    output_len: int | None = None  # None: the reply's length (vLLM: the tokenized reference answer)


TEXT = (
    HFText(("Aeala/ShareGPT_Vicuna_unfiltered",), lambda r: (r["conversations"][0]["value"],
                                                              r["conversations"][1]["value"]), split=None),
    HFText(("likaixin/InstructCoder",), lambda r: (_INSTRUCT_CODER.format(**r), None), output_len=200),
    HFText(("philschmid/mt-bench",), lambda r: (r["turns"][0], None), output_len=256),
    HFText(("openai/openai_humaneval",), lambda r: (r["prompt"], None), split="test", output_len=256),
    HFText(("openai/gsm8k",), lambda r: (r["question"], None), split="test", subset="main", output_len=256),
    HFText(("vdaita/edit_5k_char", "vdaita/edit_10k_char"), lambda r: (_BLAZEDIT.format(**r), None),
           output_len=4000),
    HFText(("AI-MO/aimo-validation-aime", "AI-MO/NuminaMath-1.5", "AI-MO/NuminaMath-CoT"),
           lambda r: (r["problem"], r["solution"])),
    HFText(("zed-industries/zeta",), _zeta),
    HFText(("mgoin/mlperf-inference-llama2-data", "mgoin/mlperf-inference-llama3.1-data"),
           lambda r: (f"{r['system_prompt']}\n\n{r['question']}", r["output"])),
)  # fmt: skip
REFUSED = {
    **dict.fromkeys(
        ("lmms-lab/LLaVA-OneVision-Data", "lmarena-ai/VisionArena-Chat", "lmarena-ai/vision-arena-bench-v0.1",
         "yale-nlp/MMVU", "Lin-Chen/MMStar"),
        "multimodal (images or video): wattbench sends text prompts only",
    ),
    **dict.fromkeys(
        ("openslr/librispeech_asr", "facebook/voxpopuli", "LIUM/tedlium", "edinburghcstr/ami", "speechcolab/gigaspeech",
         "kensho/spgispeech"),
        "audio (speech recognition): wattbench sends text prompts only",
    ),
    "gorilla-llm/Berkeley-Function-Calling-Leaderboard": "it sends tool schemas with each request (function calling), "
    "which wattbench does not",
}  # fmt: skip
SUFFIXES = (".parquet", ".jsonl", ".json", ".arrow")


def which(name: str) -> HFText:
    if name in REFUSED:
        raise DatasetError(f"--dataset-name hf {name} is not supported: {REFUSED[name]}")
    for d in TEXT:
        if name in d.names:
            return d
    known = ", ".join(n for d in TEXT for n in d.names)
    raise DatasetError(f"hf dataset {name!r} is not one of vLLM's text datasets ({known}); give --hf-name")


def _cache_dirs(hub_id: str) -> list[Path]:
    """Where a hub dataset's files would be on this machine: the hub cache's snapshots, the `datasets` cache."""
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    hub = Path(os.environ.get("HF_HUB_CACHE") or home / "hub")
    ds_cache = Path(os.environ.get("HF_DATASETS_CACHE") or home / "datasets")
    org_name = hub_id.replace("/", "--")
    return [
        *sorted((hub / f"datasets--{org_name}" / "snapshots").glob("*")),
        ds_cache / hub_id.replace("/", "___"),
    ]


def _files(root: Path, split: str | None, subset: str | None) -> list[Path]:
    """The data files under root (itself, if a file) of the split and subset asked for, by their names."""
    if root.is_file():
        return [root]
    every = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
    every = [p for p in every if not any(part.startswith(".") for part in p.relative_to(root).parts)]

    def named(p: Path, word: str) -> bool:
        rel = p.relative_to(root)
        return any(part == word or part.startswith((f"{word}-", f"{word}.", f"{word}_")) for part in rel.parts)

    if subset:
        every = [p for p in every if named(p, subset)] or every
    if split:
        every = [p for p in every if named(p, split)]
    return every


def _rows_of(p: Path) -> list[dict]:
    suffix = p.suffix.lower()
    if suffix in (".parquet", ".arrow"):
        try:
            import pyarrow as pa  # type: ignore
            import pyarrow.parquet as pq  # type: ignore
        except ImportError:
            raise DatasetError(
                f"{p}: reading {suffix} files needs pyarrow (pip install pyarrow, or the `datasets` package); or give "
                "a .jsonl/.json export of the dataset"
            ) from None
        try:
            if suffix == ".parquet":
                return pq.read_table(p).to_pylist()
            with pa.memory_map(str(p)) as src:
                try:
                    return pa.ipc.open_stream(src).read_all().to_pylist()
                except pa.ArrowInvalid:
                    return pa.ipc.open_file(src).read_all().to_pylist()
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(f"{p}: not a readable {suffix} file ({exc})") from None
    rows = records(p)
    bad = next((i for i, r in enumerate(rows, 1) if not isinstance(r, dict)), None)
    if bad:
        raise DatasetError(f"{p}: entry {bad} is not an object")
    return rows


def read(path: Path | None, opts: Mapping[str, Any]) -> list[Entry]:
    hub_id = opts.get("hf_name") or (str(path) if path is not None else None)
    if not hub_id:
        raise DatasetError("--dataset-name hf needs --dataset-path (a local file or folder) and/or --hf-name")
    d = which(str(hub_id))
    split, subset = opts.get("hf_split") or d.split, opts.get("hf_subset") or d.subset
    roots = [path] if path is not None and path.exists() else _cache_dirs(str(hub_id))
    files: list[Path] = []
    for root in roots:
        if root.exists() and (files := _files(root, split, subset)):
            break
    if not files:
        where = ", ".join(str(r) for r in roots)
        raise DatasetError(
            f"hf dataset {hub_id}: no {split or 'data'} files found locally (looked in {where}); wattbench reads no "
            "hub at run time: download it first (e.g. `huggingface-cli download --repo-type dataset "
            f"{d.names[0]} --local-dir DIR`) and give DIR as --dataset-path"
        )
    return _entries(d, [row for f in files for row in _rows_of(f)], opts, files[0])


def _entries(d: HFText, rows: list[dict], opts: Mapping[str, Any], where: Path) -> list[Entry]:
    lo, hi = float(opts.get("blazedit_min_distance") or 0.0), float(opts.get("blazedit_max_distance") or 1.0)
    fixed = opts.get("hf_output_len") or d.output_len
    out = []
    for i, row in enumerate(rows, 1):
        if "norm_distance" in row and not lo <= float(row["norm_distance"]) <= hi:  # vLLM's Blazedit filter
            continue
        try:
            prompt, reply = d.row(row)
        except (KeyError, IndexError, TypeError) as exc:
            raise DatasetError(
                f"{where}: row {i} lacks {exc} ({d.names[0]}'s columns expected: {', '.join(sorted(row))[:200]} found)"
            ) from None
        out.append(Entry(prompt=str(prompt), reply=None if reply is None else str(reply), output_tokens=fixed))
    if not out:
        raise DatasetError(f"{where}: no rows")
    return out
