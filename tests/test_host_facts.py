"""Host facts (agent/wattbench_agent/hostfacts.py): what /proc says, read exactly; the engine's CPU time with its
children; the model's weights hash and its bounded cost; GPU identity from NVML; a real emulator run's bundle
carrying all of it into the warehouse; and v_window_flags on hand-made windows."""

from __future__ import annotations

import copy
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.reliability.conftest import emulator_spec, rows
from wattbench.warehouse import connect, ingest_bundle
from wattbench_agent import hostfacts
from wattbench_agent.loadgen.replay import bundle_summaries
from wattbench_agent.runner import run_spec
from wattbench_agent.telemetry import open_sampler
from wattbench_agent.telemetry.fake_nvml import synthetic_h200_trace

LINUX = sys.platform.startswith("linux")


def fake_root(tmp_path: Path, files: dict[str, str]) -> tuple[Path, Path]:
    """A /proc and a /sys holding `files` (paths relative to their root, e.g. 'proc/stat')."""
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path / "proc", tmp_path / "sys"


def cpuinfo(flags: str, model: str = "AMD EPYC 9654 96-Core Processor", n: int = 2) -> str:
    return "".join(
        f"processor\t: {i}\nmodel name\t: {model}\ncpu MHz\t\t: {2000 + 100 * i}.0\nflags\t\t: {flags}\n\n"
        for i in range(n)
    )


@pytest.mark.parametrize(
    "files, expected",
    [
        ({"proc/cpuinfo": cpuinfo("fpu sse2 avx")}, "none"),
        (
            {
                "proc/cpuinfo": cpuinfo("fpu hypervisor avx"),
                "sys/class/dmi/id/sys_vendor": "Amazon EC2\n",
                "sys/class/dmi/id/product_name": "p5.48xlarge\n",
            },
            "Amazon EC2 p5.48xlarge",
        ),
        (
            {
                "proc/cpuinfo": cpuinfo("fpu hypervisor"),
                "sys/devices/system/clocksource/clocksource0/available_clocksource": "tsc kvm-clock \n",
            },
            "kvm",
        ),
        ({"proc/cpuinfo": cpuinfo("fpu hypervisor")}, "unknown"),
        ({"proc/cpuinfo": "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n"}, None),
    ],
)
def test_hypervisor_from_what_the_host_says(tmp_path, monkeypatch, files, expected):
    proc, sys_ = fake_root(tmp_path, files)
    monkeypatch.setattr(hostfacts, "PROC", proc)
    monkeypatch.setattr(hostfacts, "SYS", sys_)
    assert hostfacts.hypervisor() == expected


def test_cpu_model_and_clock(tmp_path, monkeypatch):
    proc, sys_ = fake_root(
        tmp_path,
        {
            "proc/cpuinfo": cpuinfo("fpu", n=2),
            "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": "3700000\n",
            "sys/fs/cgroup/cpu.max": "150000 100000\n",
        },
    )
    monkeypatch.setattr(hostfacts, "PROC", proc)
    monkeypatch.setattr(hostfacts, "SYS", sys_)
    facts = hostfacts.host_facts()
    assert facts["cpu_model"] == "AMD EPYC 9654 96-Core Processor"
    assert facts["cpu_mhz"] == 2050.0 and facts["cpu_max_mhz"] == 3700.0
    assert facts["cpu_usable"] == min(1.5, len(os.sched_getaffinity(0)))  # the cgroup's quota: 1.5 CPUs
    assert facts["cpu_logical"] == os.cpu_count() and facts["host"] == socket.gethostname()


def test_a_window_of_host_cpu_time_exactly(tmp_path, monkeypatch):
    """busy CPUs = (all - idle - iowait) / all x logical CPUs; steal = stolen / all, from /proc/stat's deltas."""
    stat = "cpu  {} 0 {} {} {} 0 0 {} 0 0\ncpu0 1 2 3\n"
    proc, _ = fake_root(
        tmp_path, {"proc/stat": stat.format(1000, 500, 8000, 100, 0), "proc/loadavg": "3.50 2 1 1/9 9\n"}
    )
    monkeypatch.setattr(hostfacts, "PROC", proc)
    w = hostfacts.CpuWindow(engine_pid=None)
    w.begin()
    # 1000 jiffies later: 600 user+system, 300 idle, 50 iowait, 50 stolen
    (proc / "stat").write_text(stat.format(1400, 700, 8300, 150, 50))
    out = w.end()
    assert out["host_busy_cpus"] == pytest.approx(650 / 1000 * os.cpu_count())
    assert out["host_steal_share"] == pytest.approx(0.05)
    assert out["host_load_1m"] == 3.5 and out["engine_cpu_s"] is None


@pytest.mark.skipif(not LINUX, reason="/proc")
def test_engine_cpu_time_counts_its_children_alive_and_ended():
    """A process tree's CPU: a child still running is counted as itself, one that ended through its parent."""
    burn = "import time\nt=time.process_time()\nwhile time.process_time()-t<0.4: pass\n"
    w = hostfacts.CpuWindow(engine_pid=os.getpid())
    w.begin()
    subprocess.run([sys.executable, "-c", burn], check=True)  # ended and reaped: in our cutime
    alive = subprocess.Popen([sys.executable, "-c", burn + "time.sleep(30)"])
    try:
        deadline = time.time() + 60
        while hostfacts.tree_cpu_ticks(alive.pid) * (1 / os.sysconf("SC_CLK_TCK")) < 0.35 and time.time() < deadline:
            time.sleep(0.05)
        out = w.end()
    finally:
        alive.kill()
        alive.wait()
    assert out["engine_cpu_s"] >= 0.7  # 0.4 s each, less a tick of rounding each
    assert hostfacts.tree_cpu_ticks(2**22 + 12345) is None  # no such process


@pytest.mark.parametrize("children_files", [True, False])
def test_process_tree_ticks_from_proc(tmp_path, monkeypatch, children_files):
    """The tree of process 10 (11 and 12 its children, 13 a grandchild; 99 a stranger): its ticks and its reaped
    children's, found through the kernel's children lists where it has them, else through every process's parent."""
    tree = {10: (1, [11, 12], (100, 20, 5, 1)), 11: (10, [13], (50, 5, 0, 0)), 12: (10, [], (7, 3, 0, 0)),
            13: (11, [], (1, 1, 0, 0)), 99: (1, [], (1000, 1000, 0, 0))}  # fmt: skip
    files = {}
    for pid, (ppid, kids, (ut, st, cut, cst)) in tree.items():
        files[f"proc/{pid}/stat"] = f"{pid} (py (x)) S {ppid} 1 1 0 -1 0 0 0 0 0 {ut} {st} {cut} {cst} 20 0 1 0 5\n"
        if children_files:
            files[f"proc/{pid}/task/{pid}/children"] = "".join(f"{k} " for k in kids)
    proc, _ = fake_root(tmp_path, files)
    monkeypatch.setattr(hostfacts, "PROC", proc)
    assert hostfacts.tree_cpu_ticks(10) == 126 + 55 + 10 + 2
    assert hostfacts.tree_cpu_ticks(11) == 57
    assert hostfacts.tree_cpu_ticks(50) is None


def test_model_weights_hash_is_sampled_and_bounded(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 4096}')
    big = model / "model-00001-of-00001.safetensors"
    size = 6 << 20
    big.write_bytes(bytes(range(256)) * (size // 256))
    first = hostfacts.model_weights_hash(model)
    assert first["hash"].startswith("sampled-v1:") and first["files"] == 2
    assert first["bytes"] == size + len('{"hidden_size": 4096}') and first["read_bytes"] == 3 * (1 << 20) + 21
    assert first == {**hostfacts.model_weights_hash(model), "seconds": first["seconds"]}  # stable

    def changed(at: int) -> str:
        data = bytearray(big.read_bytes())
        data[at] ^= 0xFF
        big.write_bytes(bytes(data))
        try:
            return hostfacts.model_weights_hash(model)["hash"]
        finally:
            data[at] ^= 0xFF
            big.write_bytes(bytes(data))

    for at in (0, size // 2, size - 1):  # the start (header), middle and end blocks are read
        assert changed(at) != first["hash"], at
    assert changed(size // 4) == first["hash"]  # a byte outside the blocks: not read (a sampled hash, as documented)
    (model / "config.json").write_text('{"hidden_size": 4097}')
    assert hostfacts.model_weights_hash(model)["hash"] != first["hash"]
    (model / "config.json").write_text('{"hidden_size": 4096}')
    (model / "tokenizer.json").write_text("{}")
    assert hostfacts.model_weights_hash(model)["hash"] != first["hash"]
    assert hostfacts.model_weights_hash(big)["files"] == 1  # one file (a GGUF) is a model too
    assert hostfacts.model_weights_hash("meta-llama/Llama-3.1-8B-Instruct") is None  # a name, not a local folder


def test_model_weights_hash_reads_at_most_its_budget(tmp_path):
    """200 sparse 1 GiB shards (200 GiB, no disk used): 32 MiB of blocks across them, whatever the model's size."""
    model = tmp_path / "big"
    model.mkdir()
    for i in range(200):
        with open(model / f"model-{i:05d}.safetensors", "wb") as f:
            f.truncate(1 << 30)
    found = hostfacts.model_weights_hash(model)
    assert found["bytes"] == 200 << 30
    assert found["read_bytes"] <= hostfacts.SAMPLE_BUDGET_BYTES
    assert found["read_bytes"] >= 200 * 3 * hostfacts.MIN_BLOCK_BYTES


def test_gpu_serial_and_pci_bus_id_from_nvml():
    """What NVML says of the board goes to the deployment's row; a GPU that does not say is NULL, not invented."""
    trace = synthetic_h200_trace(seconds=2.0)
    calls = trace["devices"][0]["calls"]
    plain = copy.deepcopy(trace)
    calls["nvmlDeviceGetSerial"] = [[0.0, 0.03, "1654922001234"]]
    calls["nvmlDeviceGetPciInfo"] = [[0.0, 0.03, {"busId": "00000000:18:00.0", "domain": 0, "bus": 24}]]
    with open_sampler("nvml", nvml={"fake": trace, "latency_scale": 0}) as s:
        cols = s.deployment_columns()
    assert cols["gpu_serials"] == ["1654922001234"] and cols["gpu_pci_bus_ids"] == ["00000000:18:00.0"]
    with open_sampler("nvml", nvml={"fake": plain, "latency_scale": 0}) as s:
        cols = s.deployment_columns()
    assert cols["gpu_serials"] is None and cols["gpu_pci_bus_ids"] is None


@pytest.mark.skipif(not LINUX, reason="/proc")
def test_an_emulator_run_bundle_carries_host_facts_into_the_warehouse(tmp_path):
    spec = emulator_spec("hostfacts-1", tmp_path / "bundle", n_points=1, duration_s=1.5)
    bundle = run_spec(spec, log=lambda m: None)
    (dep,) = rows(bundle, "deployments")
    assert dep["host"] == socket.gethostname() and dep["cpu_logical"] == os.cpu_count()
    assert dep["cpu_model"] and dep["kernel"] and dep["cpu_usable"] > 0
    assert "hypervisor" in dep and "cpu_mhz" in dep
    assert dep["model_weights_hash"] is None  # the emulator's model is a name, not a folder here
    (lr,) = rows(bundle, "load_runs")
    assert lr["status"] == "ok"
    assert 0 <= lr["host_busy_cpus"] <= os.cpu_count() and 0 <= lr["host_steal_share"] <= 1
    assert lr["host_load_1m"] >= 0
    # the emulator's server is the engine: it worked through the window, and never more than every CPU
    assert 0 < lr["engine_cpu_s"] <= lr["window_s"] * os.cpu_count()
    assert lr["step_gaps"] > 0 and lr["decode_step_ms"] > 0 and lr["expected_stalled_fraction"] == 1 / 15
    assert lr["summary"]["steps"]["decode_step_ms"] == lr["decode_step_ms"]
    # `wattbench inspect BUNDLE`: the steps made again from the bundle's requests (binary token times) are the live ones
    (again,) = bundle_summaries(bundle)
    assert again["steps"] == lr["summary"]["steps"] and again["load_point_id"] == lr["load_point_id"]
    with connect(tmp_path / "w.duckdb") as con:
        ingest_bundle(con, bundle)
        got = con.execute(
            "SELECT d.cpu_model, d.host, f.host_busy_cpus, f.engine_cpus, f.host_saturated, f.gpu_throttled, "
            "p.decode_step_ms, p.step_state FROM deployments d, v_window_flags f, "
            "(SELECT decode_step_ms, phase_state AS step_state FROM v_load_points) p"
        ).fetchone()
    assert got[0] == dep["cpu_model"] and got[1] == dep["host"]
    assert got[2] == pytest.approx(lr["host_busy_cpus"]) and got[3] == pytest.approx(
        lr["engine_cpu_s"] / lr["window_s"]
    )
    assert got[4] is not None and got[5] is not None  # both measured: a verdict either way
    assert got[6] == lr["decode_step_ms"] and got[7] == lr["phase_state"]


WINDOWS = [
    # load_point_id, busy CPUs, load 1m, steal, engine CPU s over 10 s, throttled share, expected flags
    ("calm", 4.0, 3.0, 0.0, 20.0, 0.0, (False, False)),
    ("busy", 15.0, 12.0, 0.0, 20.0, 0.0, (True, False)),
    ("loaded", 8.0, 16.5, 0.0, 20.0, 0.0, (True, False)),
    ("stolen", 4.0, 3.0, 0.08, 20.0, 0.0, (True, False)),
    ("engine", 7.5, 3.0, 0.0, 75.0, 0.0, (True, False)),  # 7.5 of 8 usable CPUs
    ("throttled", 4.0, 3.0, 0.0, 20.0, 0.25, (False, True)),
    ("unmeasured", None, None, None, None, None, (None, None)),
]


def test_window_flags_on_hand_made_windows(tmp_path):
    with connect(tmp_path / "w.duckdb") as con:
        con.execute(
            "INSERT INTO deployments (run_id, source, deployment_id, model, engine, config_name, status, cpu_logical, "
            "cpu_usable) VALUES ('r', 'measured', 'd', 'm', 'vllm', 'c', 'healthy', 16, 8)"
        )
        for lp, busy, load, steal, engine, throttled, _ in WINDOWS:
            con.execute(
                "INSERT INTO load_runs (run_id, source, deployment_id, load_point_id, workload, shape, status, "
                "window_s, host_busy_cpus, host_load_1m, host_steal_share, engine_cpu_s) "
                "VALUES ('r', 'measured', 'd', ?, 'w', 'concurrency', 'ok', 10, ?, ?, ?, ?)",
                [lp, busy, load, steal, engine],
            )
            if throttled is not None:
                con.execute(
                    "INSERT INTO window_gpu_stats (run_id, source, deployment_id, load_point_id, samples, "
                    "throttled_share, power_capped_share, thermal_capped_share) "
                    "VALUES ('r', 'measured', 'd', ?, 100, ?, ?, 0)",
                    [lp, throttled, throttled],
                )
        got = {
            r[0]: r[1:]
            for r in con.execute(
                "SELECT load_point_id, host_saturated, gpu_throttled, flags FROM v_window_flags"
            ).fetchall()
        }
    for lp, *_, expected in WINDOWS:
        assert got[lp][:2] == expected, lp
    assert got["calm"][2] is None and got["unmeasured"][2] is None
    assert got["busy"][2] == "host CPUs 94% busy (15.0 of 16)"
    assert got["loaded"][2] == "load average 16.5 on 16 CPUs"
    assert got["stolen"][2] == "8% of CPU time stolen by the hypervisor"
    assert got["engine"][2] == "engine used 7.5 of 8 usable CPUs"
    assert got["throttled"][2] == "GPU clocks lowered in 25% of samples (power cap 25%, thermal 0%)"
