"""Dependencies match use: every third-party module the code imports is declared by the distribution that imports
it (or by one of its extras, for optional features), every declared dependency is used, constraints.txt pins what
is installed, the tokenizer extra works, and the `[tool.dg]` block is backed by the dg CLI."""

from __future__ import annotations

import ast
import gc
import importlib.metadata as md
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTROL_PLANE = ("assets", "pipelines", "resources", "wattbench")
AGENT = ("agent/wattbench_agent",)
# Declared but not imported, with the reason they are there.
RUNTIME_ONLY = {
    "wattbench": {
        "dagster-webserver": "`make ui` serves the Dagster UI with it",
        "dagster-pipes": "pinned with dagster: the protocol the agent speaks through Pipes",
    },
    "wattbench-agent": {},
}
# Imported by the control plane only inside a maintainer's task, declared in the dev extra.
DEV_ONLY = {"scipy": "the twin's calibration (wattbench/twin/calibrate.py): bounded least squares"}
# Imported only inside a function, for a feature that says what to install when it is missing.
OPTIONAL_IMPORTS = {
    "torch": "telemetry record --load matmul, on a GPU host",
    "zeus": "the ZeusMonitor energy cross-check, where zeus-ml is installed",
    # also the agent's `datasets` extra; listed here too until the installed metadata has the extra (make install)
    "pyarrow": "wattbench load --dataset-name hf's local parquet and arrow files, where pyarrow is installed",
}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(source: str) -> ast.Module:
    """ast.parse with the garbage collector held off: on CPython 3.11 a finalizer that runs inside ast.parse (a
    Dagster instance's SQLAlchemy pool left by an earlier test, say) fails it with "SystemError: AST constructor
    recursion depth mismatch"."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source)
    finally:
        if enabled:
            gc.enable()


def imported_distributions(dirs) -> dict[str, set[str]]:
    pkgs = md.packages_distributions()
    # duckdb's engine, a compiled top-level module of the duckdb distribution (wattbench/queries.py imports it
    # alone): packages_distributions names a distribution's top-level packages and .py modules, not its extensions
    pkgs.setdefault("_duckdb", ["duckdb"])
    out: dict[str, set[str]] = {}
    own = {"assets", "pipelines", "resources", "wattbench", "wattbench_agent", "benchmarks", "tests"}
    for d in dirs:
        for f in (ROOT / d).rglob("*.py"):
            for node in ast.walk(parse(f.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in own:
                        continue
                    for dist in pkgs.get(top, [top]):
                        out.setdefault(norm(dist), set()).add(str(f.relative_to(ROOT)))
    return out


def requirements(dist: str) -> tuple[set[str], dict[str, set[str]]]:
    """(base requirements, {extra: requirements}) of an installed distribution, names normalized."""
    base: set[str] = set()
    extras: dict[str, set[str]] = {}
    for req in md.requires(dist) or []:
        name = norm(re.match(r"[A-Za-z0-9_.\-]+", req).group(0))
        m = re.search(r'extra == "([^"]+)"', req)
        (extras.setdefault(m.group(1), set()) if m else base).add(name)
    return base, extras


def test_control_plane_imports_are_declared_and_declared_deps_are_used():
    used = imported_distributions(CONTROL_PLANE)
    base, extras = requirements("wattbench")
    agent_base, _ = requirements("wattbench-agent")
    assert set(DEV_ONLY) <= extras["dev"] - base
    undeclared = {d: sorted(f)[:3] for d, f in used.items() if d not in base and d not in DEV_ONLY}
    assert not undeclared, f"imported by the control plane but not in pyproject.toml dependencies: {undeclared}"
    unused = base - set(used) - {"wattbench-agent"} - set(RUNTIME_ONLY["wattbench"])
    assert not unused, f"declared in pyproject.toml but imported nowhere in {CONTROL_PLANE}: {sorted(unused)}"
    assert "rich" not in base and "aiohttp" not in base  # unused / only the benchmark's baseline client
    # resources/k8s.py builds pods with wattbench_agent.deploy.kubernetes, which imports kubernetes
    assert any("wattbench-agent[kubernetes]" in r for r in md.requires("wattbench"))
    assert "kubernetes" in imported_distributions(AGENT) and "kubernetes" not in agent_base


def test_agent_imports_are_declared():
    used = imported_distributions(AGENT)
    base, extras = requirements("wattbench-agent")
    in_extras = set().union(*extras.values())
    undeclared = {
        d: sorted(f)[:3] for d, f in used.items() if d not in base and d not in in_extras and d not in OPTIONAL_IMPORTS
    }
    assert not undeclared, f"imported by the agent but declared nowhere in agent/pyproject.toml: {undeclared}"
    assert not base - set(used) - set(RUNTIME_ONLY["wattbench-agent"]), "agent/pyproject.toml declares unused deps"
    assert {"kubernetes", "tokenizers", "transformers"} <= in_extras
    assert "aiohttp" in requirements("wattbench")[1]["bench"]


def test_constraints_pin_every_installed_distribution():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[norm(name)] = version.strip()
    for dist in ("dagster-dg-cli", "tokenizers", "dagster", "kubernetes"):
        assert pins.get(dist) == md.version(dist), dist
    assert pins["dagster-dg-cli"] == pins["dagster"] == "1.13.27"


def test_tokenizer_extra_gives_exact_prompt_lengths(tmp_path):
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizer extra: pip install './agent[tokenizer]'")
    from wattbench_agent.loadgen.runner import run_load
    from wattbench_agent.loadgen.spec import LoadSpec
    from wattbench_agent.loadgen.testserver import server_process

    words = [f"w{i}" for i in range(500)]
    tok = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({w: i for i, w in enumerate(["<unk>"] + words)}, unk_token="<unk>")
    )
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    with server_process(ttft_ms=1, itl_ms=1) as url:
        res = run_load(
            LoadSpec(
                url=url,
                model="m",
                concurrency=1,
                input_tokens=37,
                output_tokens=3,
                duration_s=5,
                max_requests=3,
                tokenizer=str(path),
            )
        )
    assert res.summary["completed"] == 3 and all(r["input_tokens_requested"] == 37 for r in res.records)
    from wattbench_agent.loadgen.workload import Workload, load_tokenizer

    wrapped = load_tokenizer(str(path))  # the extra's code path: a tokenizer.json file
    spec = LoadSpec(model="m", concurrency=1, input_tokens=37, tokenizer=str(path))
    prompts = [Workload(spec, wrapped).item(i).prompt for i in range(5)]
    assert all(len(tok.encode(p, add_special_tokens=False).ids) == 37 for p in prompts)


def test_tool_dg_block_is_backed_by_the_dg_cli(tmp_path):
    dg = Path(sys.executable).with_name("dg")
    assert dg.exists(), "dagster-dg-cli (dev extra) provides dg"
    p = subprocess.run(
        [str(dg), "check", "defs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path)},
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "All definitions loaded successfully" in p.stdout + p.stderr
