"""Content-addressed cache of compiled engines, and the hardware lock that ties an engine to one GPU type.

A TensorRT-LLM engine is compiled for one GPU architecture and one TensorRT-LLM release: an H100 engine does not
run on an A100. So a cache entry is addressed by everything that shapes the build - EngineConfig.build_id() (model,
precision, tp, options), the engine version and the GPU (name + compute capability) - and carries a manifest:

    <cache>/<key>/manifest.json    {"key", "build_id", "engine", "engine_version", "hardware_lock", "build_s",
                                    "artifact_sha256", "artifact_bytes", "built_at", "commands", "resolved_config"}
    <cache>/<key>/engine/          the engine files (config.json, rank0.engine, ...)
    <cache>/<key>/build.log        the convert + build log

An entry appears atomically (built in a temporary folder, then renamed), so a crashed build never leaves a half
entry that a later run would take for a hit. The cache folder is data/engine_cache unless WATTBENCH_ENGINE_CACHE
says otherwise.

Agent-side code: stdlib only.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
MANIFEST = "manifest.json"


def default_cache_dir() -> Path:
    return Path(os.environ.get("WATTBENCH_ENGINE_CACHE") or REPO_ROOT / "data" / "engine_cache")


# ----------------------------------------------------------------------------------------------- the GPU present
@dataclass(frozen=True)
class GpuInfo:
    """What the hardware lock compares: the GPU's marketing name, compute capability ("9.0") and driver."""

    name: str
    compute_cap: str
    driver: str | None = None
    count: int = 1

    @property
    def sm(self) -> str:
        return sm_name(self.compute_cap)

    def lock(self, engine_version: str | None = None, tp: int | None = None) -> dict[str, Any]:
        lock = {"gpu_name": self.name, "compute_capability": self.compute_cap, "sm": self.sm, "driver": self.driver}
        if engine_version is not None:
            lock["engine_version"] = engine_version
        if tp is not None:
            lock["tp"] = tp
        return lock


GpuProbe = Callable[[], "GpuInfo | None"]


def sm_name(compute_cap: str | None) -> str:
    """'9.0' -> 'sm90', '8.0' -> 'sm80'; anything unparseable is returned as given."""
    if not compute_cap:
        return "sm?"
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", str(compute_cap))
    return f"sm{m.group(1)}{m.group(2)}" if m else str(compute_cap)


def query_gpu(nvidia_smi: str = "nvidia-smi", timeout_s: float = 15.0) -> GpuInfo | None:
    """The first GPU as nvidia-smi reports it (name, compute capability, driver), or None when there is no GPU.

    `nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader` (compute_cap needs a driver
    from 2021 or later). Returns None, never raises, when nvidia-smi is missing, fails or prints nothing.
    """
    try:
        proc = subprocess.run(
            [nvidia_smi, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    rows = [[c.strip() for c in line.split(",")] for line in proc.stdout.splitlines() if line.strip()]
    rows = [r for r in rows if len(r) >= 2 and r[0]]
    if not rows:
        return None
    name, cap = rows[0][0], rows[0][1]
    driver = rows[0][2] if len(rows[0]) > 2 else None
    return GpuInfo(name=name, compute_cap=cap, driver=driver, count=len(rows))


class HardwareMismatch(RuntimeError):
    """An engine was built for another GPU (or another engine version) than the one present."""

    kind = "hardware_mismatch"


def describe_lock(lock: dict[str, Any]) -> str:
    return f"{lock.get('gpu_name', '?')} ({lock.get('sm') or sm_name(lock.get('compute_capability'))})"


def check_hardware_lock(lock: dict[str, Any] | None, gpu: GpuInfo | None, engine_version: str | None = None) -> None:
    """Raise HardwareMismatch when an engine built under `lock` cannot run on `gpu`.

    The architecture (compute capability) decides: TensorRT engines are specific to it. A different GPU name of the
    same architecture (H100 SXM vs H100 PCIe) is accepted; a different TensorRT-LLM version is refused too, since
    engines are not portable across TensorRT releases. With no GPU present nothing can be checked (None passes:
    the server will fail on its own, and says so in its log).
    """
    if not lock or gpu is None:
        return
    built_cap = lock.get("compute_capability")
    if built_cap and str(built_cap).strip() != str(gpu.compute_cap).strip():
        raise HardwareMismatch(
            f"engine built for {describe_lock(lock)} cannot run on {gpu.name} ({gpu.sm}); rebuild for this GPU"
        )
    built_version = lock.get("engine_version")
    if engine_version and built_version and built_version != engine_version:
        raise HardwareMismatch(
            f"engine built with TensorRT-LLM {built_version} cannot be loaded by TensorRT-LLM {engine_version}; "
            "rebuild with this version"
        )


# ----------------------------------------------------------------------------------------------- artifacts
def tree_digest(path: Path) -> tuple[str, int]:
    """(sha256, total bytes) of a folder: relative paths and contents of every file, in sorted order."""
    path = Path(path)
    h = hashlib.sha256()
    total = 0
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        rel = f.name if f == path else f.relative_to(path).as_posix()
        h.update(rel.encode() + b"\0")
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
                total += len(block)
        h.update(b"\0")
    return h.hexdigest(), total


# ----------------------------------------------------------------------------------------------- the cache
class BuildCache:
    """Engines on disk, addressed by build config + engine version + GPU."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root else default_cache_dir()

    @staticmethod
    def key(build_id: str, engine_version: str | None, gpu: GpuInfo) -> str:
        blob = json.dumps(
            {
                "build_id": build_id,
                "engine_version": engine_version or "unknown",
                "gpu_name": gpu.name,
                "compute_cap": gpu.compute_cap,
            },
            sort_keys=True,
        ).encode()
        return hashlib.sha256(blob).hexdigest()[:20]

    def entry(self, key: str) -> Path:
        return self.root / key

    def lookup(self, key: str) -> dict[str, Any] | None:
        """The manifest of a complete entry (with 'engine_dir' filled in), or None."""
        d = self.entry(key)
        try:
            manifest = json.loads((d / MANIFEST).read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        if not (d / "engine").is_dir():
            return None
        manifest["engine_dir"] = str(d / "engine")
        return manifest

    def entries(self, build_id: str | None = None) -> list[dict[str, Any]]:
        """Every complete entry (optionally of one build_id), newest first."""
        out = []
        if not self.root.is_dir():
            return out
        for d in self.root.iterdir():
            if d.name.startswith(".") or not d.is_dir():
                continue
            m = self.lookup(d.name)
            if m and (build_id is None or m.get("build_id") == build_id):
                out.append(m)
        return sorted(out, key=lambda m: m.get("built_at", 0), reverse=True)

    @contextlib.contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Serialise builds of one key across processes (a second builder waits, then finds the hit)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f".{key}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def staging(self, key: str) -> Iterator[Path]:
        """A temporary folder to build into; removed unless `commit` moved it into place."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=self.root))
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def commit(self, key: str, staged: Path, manifest: dict[str, Any]) -> dict[str, Any]:
        """Write the manifest into the staged folder and rename it into place atomically."""
        manifest = {**manifest, "key": key, "built_at": manifest.get("built_at") or time.time()}
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
        dest = self.entry(key)
        if dest.exists():  # a stale, incomplete entry (no manifest): replace it
            shutil.rmtree(dest, ignore_errors=True)
        os.replace(staged, dest)
        return self.lookup(key) or {}

    def find_for_gpu(self, build_id: str, gpu: GpuInfo | None) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """(the newest entry of build_id whose lock fits `gpu`, every entry of build_id)."""
        all_entries = self.entries(build_id)
        for m in all_entries:
            try:
                check_hardware_lock(m.get("hardware_lock"), gpu)
            except HardwareMismatch:
                continue
            return m, all_entries
        return None, all_entries
