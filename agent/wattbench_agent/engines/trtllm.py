"""TensorRT-LLM: convert the checkpoint, compile an engine with trtllm-build, serve it with trtllm-serve.

Follows TensorRT-LLM 0.18.2, the release line whose documented flow is checkpoint -> engine -> trtllm-serve with the
C++ (TensorRT engine) runtime as trtllm-serve's default (docs/ENGINES.md cites the pages):

    python examples/llama/convert_checkpoint.py --model_dir M --output_dir CKPT --dtype float16 --tp_size N
    python examples/quantization/quantize.py --model_dir M --output_dir CKPT --dtype float16 --qformat fp8 \
        --kv_cache_dtype fp8 --calib_size 512 --tp_size N                      # fp8; int4_awq likewise
    trtllm-build --checkpoint_dir CKPT --output_dir ENGINE --gemm_plugin fp8 --max_batch_size 128 \
        --max_input_len 2048 --max_seq_len 4096 --max_num_tokens 8192 --workers N
    trtllm-serve ENGINE --tokenizer M --host H --port P --tp_size N --max_batch_size 128 --max_num_tokens 8192

Precision -> build steps: fp16/bf16 convert with --dtype float16/bfloat16 (gemm plugin of the same dtype); fp8 and
int4-awq go through ModelOpt's quantize.py (--qformat fp8 | int4_awq, the documented route for both; convert_checkpoint
itself only does AWQ via quantize.py), gemm plugin fp8 | auto. The seed article's `convert_checkpoint.py --dtype fp8`
is not valid: --dtype takes float32|bfloat16|float16.

The engine is cached by content address (build_cache.py) with its hardware lock; serving an engine on another GPU
architecture is refused with a clear error before the server starts. TensorRT-LLM 1.x needs `backend: tensorrt`
in the options to serve an engine folder (its trtllm-serve defaults to the PyTorch backend); the newest releases
removed the TensorRT backend altogether, and this adapter's engine flow does not apply to them.

trtllm-serve's /metrics is JSON iteration statistics, not Prometheus text, so metrics_path is None (the agent's
scraper reads Prometheus only).

Agent-side code: stdlib only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from wattbench_agent.engines.base import BuildResult, EngineAdapter, EngineConfig
from wattbench_agent.engines.build_cache import (
    BuildCache,
    GpuInfo,
    GpuProbe,
    HardwareMismatch,
    check_hardware_lock,
    query_gpu,
    tree_digest,
)
from wattbench_agent.engines.failures import DeployError
from wattbench_agent.engines.options import Flag, OptionError, normalise
from wattbench_agent.safety import file_name

FOLLOWS = "0.18.2"
LOCK_FILE = "wattbench_lock.json"
_VERSION_LINE = re.compile(r"TensorRT-LLM version:\s*(\S+)")

# Every option the adapter accepts; the flag column is the trtllm-build / trtllm-serve spelling.
OPTIONS: dict[str, Flag] = {
    # trtllm-build (compiled in: changing one is a new build)
    "max_batch_size": Flag("--max_batch_size", int, help="trtllm-build and trtllm-serve --max_batch_size"),
    "max_input_len": Flag("--max_input_len", int, help="trtllm-build --max_input_len"),
    "max_seq_len": Flag("--max_seq_len", int, help="trtllm-build --max_seq_len (prompt + output)"),
    "max_num_tokens": Flag("--max_num_tokens", int, help="trtllm-build and trtllm-serve --max_num_tokens"),
    "gemm_plugin": Flag("--gemm_plugin", str, help="default from precision: float16 | bfloat16 | fp8 | auto"),
    # checkpoint step
    "checkpoint_dtype": Flag("--dtype", str, help="dtype of the non-quantised part (default from precision)"),
    "kv_cache_dtype": Flag("--kv_cache_dtype", str, help="quantize.py --kv_cache_dtype fp8|int8 (fp8 default for fp8)"),
    "calib_size": Flag("--calib_size", int, help="quantize.py calibration samples"),
    "awq_block_size": Flag("--awq_block_size", int, help="quantize.py AWQ group size (int4-awq)"),
    # trtllm-serve (runtime)
    "kv_cache_free_gpu_memory_fraction": Flag(
        "--kv_cache_free_gpu_memory_fraction", float, help="trtllm-serve share of free HBM for the KV cache"
    ),
    "backend": Flag("--backend", str, help="trtllm-serve --backend (TensorRT-LLM 1.x: tensorrt)"),
    "tokenizer": Flag("--tokenizer", str, help="trtllm-serve --tokenizer (default: the model)"),
    # wattbench
    "engine_dir": Flag(None, str, help="a prebuilt engine folder: no build, its lock is still checked"),
    "keep_checkpoint": Flag(None, bool, help="keep the converted checkpoint next to the engine"),
    "extra_build_args": Flag(None, str, help="more trtllm-build flags, verbatim"),
    "extra_serve_args": Flag(None, str, help="more trtllm-serve flags, verbatim"),
}
ALIASES = {"kv_cache_free_gpu_mem_fraction": "kv_cache_free_gpu_memory_fraction"}  # the emulator's knob name
BUILD_KEYS = ("max_batch_size", "max_input_len", "max_seq_len", "max_num_tokens")

PRECISIONS = {
    #            step      checkpoint dtype  qformat     gemm plugin
    "fp16": ("convert", "float16", None, "float16"),
    "bf16": ("convert", "bfloat16", None, "bfloat16"),
    "fp8": ("quantize", "float16", "fp8", "fp8"),
    "int4-awq": ("quantize", "float16", "int4_awq", "auto"),
}


def _split(value: Any) -> list[str]:
    import shlex

    if value is None:
        return []
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


def find_example_script(name: str, subdir: str) -> str:
    """Where TensorRT-LLM's example script lives: $WATTBENCH_TRTLLM_<NAME>, then PATH, then the examples folder
    ($TRTLLM_EXAMPLES_DIR, default /app/tensorrt_llm/examples as in NVIDIA's containers)."""
    env = os.environ.get(f"WATTBENCH_TRTLLM_{Path(name).stem.upper()}")
    if env:
        return env
    on_path = shutil.which(name)
    if on_path:
        return on_path
    examples = os.environ.get("TRTLLM_EXAMPLES_DIR", "/app/tensorrt_llm/examples")
    return str(Path(examples) / subdir / name)


def detect_version(timeout_s: float = 120.0) -> str | None:
    """The installed TensorRT-LLM version: $WATTBENCH_TRTLLM_VERSION, the tensorrt_llm package, or the
    '[TensorRT-LLM] TensorRT-LLM version: X' line trtllm-build prints on start."""
    env = os.environ.get("WATTBENCH_TRTLLM_VERSION")
    if env:
        return env
    try:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("tensorrt_llm")
        except PackageNotFoundError:
            pass
    except ImportError:  # pragma: no cover
        pass
    exe = shutil.which("trtllm-build")
    if not exe:
        return None
    try:
        proc = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    m = _VERSION_LINE.search(proc.stdout + proc.stderr)
    return m.group(1) if m else None


class TrtllmAdapter(EngineAdapter):
    name = "trtllm"
    image = "nvcr.io/nvidia/tensorrt-llm/release:0.18.2"
    follows_version = FOLLOWS
    health_path = "/health"
    metrics_path = None  # trtllm-serve's /metrics is JSON iteration stats, not Prometheus text
    source = "measured"
    builds_on_gpu = True  # the engine is locked to the GPU kind it was built on
    checked_versions = (FOLLOWS,)  # by contract tests only: no TensorRT-LLM has run under wattbench yet
    version_patterns = (_VERSION_LINE,)  # trtllm-serve logs "[TensorRT-LLM] TensorRT-LLM version: X" at start

    def __init__(
        self, gpu_probe: GpuProbe | None = None, cache_dir: str | os.PathLike | None = None, version_probe=None
    ):
        self.gpu_probe: GpuProbe = gpu_probe or query_gpu
        self.cache = BuildCache(cache_dir)
        self.version_probe = version_probe or detect_version

    # ------------------------------------------------------------------ options
    def options(self, cfg: EngineConfig) -> dict[str, Any]:
        opts = normalise(
            {k: v for k, v in cfg.options.items() if k not in ("extra_build_args", "extra_serve_args")},
            OPTIONS,
            "trtllm",
            ALIASES,
        )
        for key in ("extra_build_args", "extra_serve_args"):
            if key in cfg.options:
                opts[key] = _split(cfg.options[key])
        if cfg.precision not in PRECISIONS:
            raise OptionError(
                f"trtllm: precision {cfg.precision!r} not supported; expected one of {', '.join(PRECISIONS)}"
            )
        msl, mil = opts.get("max_seq_len"), opts.get("max_input_len")
        if msl is not None and mil is not None and mil > msl:
            raise OptionError(f"trtllm: max_input_len ({mil}) exceeds max_seq_len ({msl})")
        return opts

    def resolved_config(self, cfg: EngineConfig) -> dict[str, Any]:
        out: dict[str, Any] = {
            "engine": "trtllm",
            "model": cfg.model,
            "precision": cfg.precision,
            "tp": cfg.tp,
            "follows_version": FOLLOWS,
        }
        try:
            opts = self.options(cfg)
        except OptionError as exc:
            return {**out, **cfg.options, "config_error": str(exc)}
        step, ckpt_dtype, qformat, gemm = PRECISIONS[cfg.precision]
        out.update(
            {
                "checkpoint_step": step,
                "checkpoint_dtype": opts.get("checkpoint_dtype") or ckpt_dtype,
                "qformat": qformat,
                "gemm_plugin": opts.get("gemm_plugin") or gemm,
            }
        )
        if qformat:
            out["kv_cache_dtype"] = opts.get("kv_cache_dtype", "fp8" if qformat == "fp8" else None)
        out.update({k: v for k, v in opts.items() if k not in out})
        return out

    # ------------------------------------------------------------------ commands
    def checkpoint_command(self, cfg: EngineConfig, ckpt_dir: str | Path) -> list[str]:
        opts = self.options(cfg)
        step, ckpt_dtype, qformat, _ = PRECISIONS[cfg.precision]
        dtype = opts.get("checkpoint_dtype") or ckpt_dtype
        if step == "convert":
            script = find_example_script("convert_checkpoint.py", "llama")
            return [
                sys.executable,
                script,
                "--model_dir",
                cfg.model,
                "--output_dir",
                str(ckpt_dir),
                "--dtype",
                dtype,
                "--tp_size",
                str(cfg.tp),
            ]
        script = find_example_script("quantize.py", "quantization")
        cmd = [
            sys.executable,
            script,
            "--model_dir",
            cfg.model,
            "--output_dir",
            str(ckpt_dir),
            "--dtype",
            dtype,
            "--qformat",
            qformat,
        ]
        kv = opts.get("kv_cache_dtype", "fp8" if qformat == "fp8" else None)
        if kv:
            cmd += ["--kv_cache_dtype", kv]
        if qformat == "int4_awq":
            cmd += ["--awq_block_size", str(opts.get("awq_block_size") or 128)]
        cmd += [
            "--calib_size",
            str(opts.get("calib_size") or (512 if qformat == "fp8" else 32)),
            "--tp_size",
            str(cfg.tp),
        ]
        return cmd

    def build_command(self, cfg: EngineConfig, ckpt_dir: str | Path, engine_dir: str | Path) -> list[str]:
        opts = self.options(cfg)
        gemm = opts.get("gemm_plugin") or PRECISIONS[cfg.precision][3]
        cmd = [
            "trtllm-build",
            "--checkpoint_dir",
            str(ckpt_dir),
            "--output_dir",
            str(engine_dir),
            "--gemm_plugin",
            gemm,
        ]
        for key in BUILD_KEYS:
            if opts.get(key) is not None:
                cmd += [OPTIONS[key].flag, str(opts[key])]
        cmd += ["--workers", str(cfg.tp)]
        return cmd + list(opts.get("extra_build_args") or [])

    def serve_command(self, cfg: EngineConfig, host: str, port: int, artifact_path: str | None = None) -> list[str]:
        try:
            opts = self.options(cfg)
        except OptionError as exc:
            raise DeployError("config_error", str(exc)) from None
        engine_dir = artifact_path or opts.get("engine_dir") or self.locate_engine(cfg)
        self.check_engine(engine_dir)
        cmd = [
            "trtllm-serve",
            str(engine_dir),
            "--tokenizer",
            opts.get("tokenizer") or cfg.model,
            "--host",
            host,
            "--port",
            str(port),
        ]
        if opts.get("backend"):
            cmd += ["--backend", opts["backend"]]
        for key in ("max_batch_size", "max_num_tokens", "max_seq_len"):
            if opts.get(key) is not None:
                cmd += [OPTIONS[key].flag, str(opts[key])]
        cmd += ["--tp_size", str(cfg.tp)]
        if opts.get("kv_cache_free_gpu_memory_fraction") is not None:
            cmd += ["--kv_cache_free_gpu_memory_fraction", str(opts["kv_cache_free_gpu_memory_fraction"])]
        return cmd + list(opts.get("extra_serve_args") or [])

    # ------------------------------------------------------------------ engines on disk
    def locate_engine(self, cfg: EngineConfig) -> str:
        """The cached engine of this config that fits the GPU present; a clear DeployError otherwise."""
        gpu = self.gpu_probe()
        fit, entries = self.cache.find_for_gpu(cfg.build_id(), gpu)
        if fit:
            return fit["engine_dir"]
        if entries and gpu is not None:
            lock = entries[0].get("hardware_lock") or {}
            try:
                check_hardware_lock(lock, gpu)
            except HardwareMismatch as exc:
                raise DeployError("hardware_mismatch", f"{exc} ({entries[0]['engine_dir']})") from None
        raise DeployError(
            "not_built",
            f"no TensorRT-LLM engine for build {cfg.build_id()} ({cfg.config_name}) in "
            f"{self.cache.root}; materialize engine_builds first (or give engine_dir)",
        )

    def check_engine(self, engine_dir: str | os.PathLike) -> None:
        """Refuse an engine whose hardware lock does not fit the GPU present (DeployError 'hardware_mismatch')."""
        import json

        lock_path = Path(engine_dir) / LOCK_FILE
        try:
            lock = json.loads(lock_path.read_text())
        except (OSError, ValueError):
            return  # an engine built elsewhere without a wattbench lock, or not visible from here (k8s dry run)
        try:
            check_hardware_lock(lock, self.gpu_probe())
        except HardwareMismatch as exc:
            raise DeployError("hardware_mismatch", f"{exc} ({engine_dir})") from None

    # ------------------------------------------------------------------ build
    def build(self, cfg: EngineConfig, workdir: Path | None) -> BuildResult:
        resolved = self.resolved_config(cfg)
        if "config_error" in resolved:
            return BuildResult(
                status="failed",
                error_kind="config_error",
                error_text=resolved["config_error"],
                engine_version=FOLLOWS,
                resolved_config=resolved,
            )
        opts = self.options(cfg)
        gpu = self.gpu_probe()
        if opts.get("engine_dir"):
            return self._prebuilt(cfg, Path(opts["engine_dir"]), gpu, resolved)
        if gpu is None:
            return BuildResult(
                status="failed",
                error_kind="no_gpu",
                resolved_config=resolved,
                error_text="TensorRT-LLM engines are built on the GPU type they run on, and nvidia-smi "
                "found no NVIDIA GPU here; run engine_builds on a GPU node",
            )
        version = self.version_probe()
        key = self.cache.key(cfg.build_id(), version, gpu)
        with self.cache.lock(key):
            hit = self.cache.lookup(key)
            if hit:
                return self._result("cached", hit, {**resolved, "engine_dir": hit["engine_dir"], "cache_key": key})
            return self._build_into_cache(cfg, key, gpu, version, resolved, workdir)

    def _build_into_cache(
        self,
        cfg: EngineConfig,
        key: str,
        gpu: GpuInfo,
        version: str | None,
        resolved: dict[str, Any],
        workdir: Path | None,
    ) -> BuildResult:
        with self.cache.staging(key) as staged:
            ckpt, engine, log_path = staged / "checkpoint", staged / "engine", staged / "build.log"
            commands = [self.checkpoint_command(cfg, ckpt), self.build_command(cfg, ckpt, engine)]
            t0 = time.perf_counter()
            with open(log_path, "wb") as log:
                for cmd in commands:
                    log.write(("$ " + " ".join(cmd) + "\n").encode())
                    log.flush()
                    try:
                        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode
                    except OSError as exc:
                        log.write(f"cannot run {cmd[0]}: {exc}\n".encode())
                        rc = 127
                    if rc != 0:
                        log.flush()
                        tail = log_path.read_bytes()[-3000:].decode(errors="replace")
                        self._keep_log(log_path, workdir, cfg)
                        return BuildResult(
                            status="failed",
                            engine_version=version or FOLLOWS,
                            error_kind="build_failed",
                            resolved_config=resolved,
                            error_text=f"{Path(cmd[1] if cmd[0] == sys.executable else cmd[0]).name} "
                            f"exited with {rc}:\n{tail}",
                        )
            build_s = round(time.perf_counter() - t0, 3)
            log_text = log_path.read_text(errors="replace")
            m = _VERSION_LINE.search(log_text)
            version = m.group(1) if m else version
            if not (engine / "config.json").is_file() or not list(engine.glob("*.engine")):
                self._keep_log(log_path, workdir, cfg)
                return BuildResult(
                    status="failed",
                    engine_version=version or FOLLOWS,
                    error_kind="build_failed",
                    resolved_config=resolved,
                    error_text=f"trtllm-build exited 0 but {engine} holds no config.json + *.engine",
                )
            lock = gpu.lock(engine_version=version, tp=cfg.tp)
            import json

            (engine / LOCK_FILE).write_text(json.dumps(lock, indent=2, sort_keys=True))
            if not resolved.get("keep_checkpoint"):
                shutil.rmtree(ckpt, ignore_errors=True)
            sha, size = tree_digest(engine)
            manifest = {
                "build_id": cfg.build_id(),
                "engine": "trtllm",
                "engine_version": version,
                "hardware_lock": lock,
                "build_s": build_s,
                "artifact_sha256": sha,
                "artifact_bytes": size,
                "commands": commands,
                "resolved_config": resolved,
                "config_name": cfg.config_name,
            }
            entry = self.cache.commit(key, staged, manifest)
        self._keep_log(self.cache.entry(key) / "build.log", workdir, cfg)
        return self._result("built", entry, {**resolved, "engine_dir": entry["engine_dir"], "cache_key": key})

    @staticmethod
    def _keep_log(log_path: Path, workdir: Path | None, cfg: EngineConfig) -> None:
        if workdir is None or not log_path.exists():
            return
        Path(workdir).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log_path, Path(workdir) / file_name(cfg.config_name, f".{cfg.build_id()}.build.log"))

    @staticmethod
    def _result(status: str, manifest: dict[str, Any], resolved: dict[str, Any]) -> BuildResult:
        return BuildResult(
            status=status,
            build_s=manifest.get("build_s"),
            artifact_sha256=manifest.get("artifact_sha256"),
            artifact_bytes=manifest.get("artifact_bytes"),
            artifact_path=manifest.get("engine_dir"),
            engine_version=manifest.get("engine_version"),
            hardware_lock=manifest.get("hardware_lock"),
            resolved_config=resolved,
        )

    def _prebuilt(
        self, cfg: EngineConfig, engine_dir: Path, gpu: GpuInfo | None, resolved: dict[str, Any]
    ) -> BuildResult:
        import json

        try:
            lock = json.loads((engine_dir / LOCK_FILE).read_text())
        except (OSError, ValueError):
            lock = None
        try:
            check_hardware_lock(lock, gpu)
        except HardwareMismatch as exc:
            return BuildResult(
                status="failed",
                error_kind="hardware_mismatch",
                error_text=str(exc),
                hardware_lock=lock,
                resolved_config=resolved,
                engine_version=(lock or {}).get("engine_version"),
            )
        if not engine_dir.is_dir():
            return BuildResult(
                status="failed",
                error_kind="build_failed",
                resolved_config=resolved,
                error_text=f"engine_dir {engine_dir} does not exist",
            )
        sha, size = tree_digest(engine_dir)
        return BuildResult(
            status="cached",
            artifact_sha256=sha,
            artifact_bytes=size,
            artifact_path=str(engine_dir),
            engine_version=(lock or {}).get("engine_version"),
            hardware_lock=lock,
            resolved_config={**resolved, "engine_dir": str(engine_dir), "prebuilt": True},
        )
