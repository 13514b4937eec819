"""Write bench_serve_flags.txt: every flag vLLM's `vllm bench serve` parser accepts, read from vLLM's own argparse
definitions (no vLLM install needed: the source is parsed, not imported).

    python tests/data/vllm/make_bench_serve_flags.py /path/to/vllm/benchmarks > tests/data/vllm/bench_serve_flags.txt

The folder is vLLM's `vllm/benchmarks/` of the release named in the header (serve.py's `add_cli_args`, which calls
datasets/datasets.py's `add_dataset_parser` and, through it, `add_random_dataset_base_args` and
`add_random_multimodal_dataset_args`). A `BooleanOptionalAction` flag also gives its `--no-` form, as argparse does.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

FUNCTIONS = {
    "serve.py": ("add_cli_args",),
    "datasets/datasets.py": (
        "add_dataset_parser",
        "add_random_dataset_base_args",
        "add_random_multimodal_dataset_args",
    ),
}


def flags_of(source: str, functions: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.FunctionDef) and node.name in functions):
            continue
        for call in ast.walk(node):
            if not (isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "add_argument"):
                continue
            names = [a.value for a in call.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")]
            boolean = any(
                k.arg == "action" and getattr(k.value, "attr", None) == "BooleanOptionalAction" for k in call.keywords
            )
            for name in names:
                out.append(name)
                if boolean:
                    out.append("--no-" + name[2:])
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else ".")
    flags: list[str] = []
    for rel, functions in FUNCTIONS.items():
        for flag in flags_of((root / rel).read_text(encoding="utf-8"), functions):
            if flag not in flags:
                flags.append(flag)
    print("# vLLM 0.25 `vllm bench serve`: every flag its parser accepts (-h/--help aside), one a line.")
    print("# Made by tests/data/vllm/make_bench_serve_flags.py from vLLM 0.25's vllm/benchmarks/ sources (serve.py")
    print("# add_cli_args; datasets/datasets.py add_dataset_parser and the random dataset argument helpers).")
    for flag in flags:
        print(flag)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
