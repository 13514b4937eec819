import json

import numpy as np
import pytest

from wattbench_agent.loadgen import LoadSpec, LoadSpecError, TraceError, arrival_offsets, load_trace
from wattbench_agent.loadgen.workload import Workload, sample_lengths, synthetic_text


def gaps(x):
    return np.diff(x)


def test_poisson_rate_and_cv():
    o = arrival_offsets("poisson", rate=50, horizon_s=200, seed=1)
    g = gaps(o)
    assert len(o) / 200 == pytest.approx(50, rel=0.05)
    assert g.std() / g.mean() == pytest.approx(1.0, abs=0.05)
    assert o[0] == 0 and np.all(g >= 0)


@pytest.mark.parametrize("k", [0.25, 4.0])
def test_gamma_burstiness(k):
    o = arrival_offsets("gamma", rate=50, horizon_s=200, burstiness=k, seed=2)
    g = gaps(o)
    assert len(o) / 200 == pytest.approx(50, rel=0.08)
    assert g.std() / g.mean() == pytest.approx(1 / np.sqrt(k), rel=0.1)


def test_surge_multiplies_rate_in_its_interval():
    o = arrival_offsets(
        "surge", rate=20, horizon_s=300, surge_factor=5, surge_start_s=100, surge_duration_s=100, seed=3
    )
    before = np.sum(o < 100) / 100
    during = np.sum((o >= 100) & (o < 200)) / 100
    after = np.sum(o >= 200) / 100
    assert before == pytest.approx(20, rel=0.1) and after == pytest.approx(20, rel=0.1)
    assert during == pytest.approx(100, rel=0.1)


def test_schedules_are_deterministic_and_capped():
    a = arrival_offsets("poisson", rate=10, horizon_s=10, seed=5)
    b = arrival_offsets("poisson", rate=10, horizon_s=10, seed=5)
    assert np.array_equal(a, b)
    assert len(arrival_offsets("poisson", rate=10, horizon_s=10, seed=5, max_requests=3)) == 3


def test_trace_jsonl_and_csv(tmp_path):
    j = tmp_path / "t.jsonl"
    j.write_text(
        '{"timestamp": 10.5, "input_tokens": 100, "output_tokens": 20}\n\n'
        '{"timestamp": 10.0, "prompt": "hello there", "output_tokens": 5}\n'
    )
    rows = load_trace(j)
    assert [r.t_s for r in rows] == [0.0, 0.5] and rows[0].prompt == "hello there" and rows[1].input_tokens == 100
    c = tmp_path / "t.csv"
    c.write_text("timestamp,input_tokens,output_tokens\n0,10,3\n0.25,20,4\n")
    rows = load_trace(c)
    assert [(r.t_s, r.input_tokens, r.output_tokens) for r in rows] == [(0, 10, 3), (0.25, 20, 4)]


@pytest.mark.parametrize(
    "name,text,line",
    [
        ("bad.csv", "timestamp,input_tokens,output_tokens\n0,10,3\nsoon,20,4\n", 3),
        ("bad2.csv", "timestamp,input_tokens,output_tokens\n0,10,3\n1,20,-4\n", 3),
        ("bad.jsonl", '{"timestamp": 0, "input_tokens": 3}\n{"timestamp": 1, "input_tokens": 3\n', 2),
        ("bad2.jsonl", '{"timestamp": 0, "input_tokens": 3}\n\n{"output_tokens": 3}\n', 3),
    ],
)
def test_trace_bad_row_names_the_line(tmp_path, name, text, line):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(TraceError, match=rf"{name}:{line}:"):
        load_trace(p)


def test_spec_from_dict_rejects_unknown_key():
    with pytest.raises(LoadSpecError, match="concurency"):
        LoadSpec.from_dict({"concurency": 4})
    with pytest.raises(LoadSpecError, match="rate"):
        LoadSpec.from_dict({"shape": "poisson"})
    s = LoadSpec.from_dict({"shape": "gamma", "rate": 3, "burstiness": 0.5})
    assert LoadSpec.from_dict(s.to_dict()) == s


def test_lengths_and_prompts():
    rng = np.random.default_rng(0)
    mix = sample_lengths({"kind": "choice", "values": [100, 32768], "weights": [0.9, 0.1]}, 1, 2000, rng)
    assert set(mix) == {100, 32768} and 0.05 < np.mean(mix == 32768) < 0.15
    u = sample_lengths({"kind": "uniform", "min": 5, "max": 9}, 1, 500, rng)
    assert u.min() == 5 and u.max() == 9
    assert len(synthetic_text(37, rng).split(" ")) == 37  # one word per token without a tokenizer

    class CharTok:  # a toy tokenizer: one token per character
        vocab_size = 26

        def encode(self, text):
            return [ord(c) for c in text]

        def decode(self, ids):
            return "".join(chr(97 + (i % 26)) for i in ids)

    assert len(CharTok().encode(synthetic_text(41, rng, CharTok()))) == 41


def test_shared_prefix_and_sharegpt(tmp_path):
    spec = LoadSpec(concurrency=1, input_tokens=50, shared_prefix_tokens=30, num_prefixes=2)
    w = Workload(spec)
    p = [w.item(i).prompt.split(" ") for i in range(4)]
    assert p[0][:30] == p[2][:30] and p[0][:30] != p[1][:30] and p[0][30:] != p[2][30:]
    assert all(len(x) == 50 for x in p)
    sg = tmp_path / "sg.json"
    sg.write_text(
        json.dumps(
            [
                {
                    "conversations": [
                        {"from": "human", "value": "Tell me a story"},
                        {"from": "gpt", "value": "Once upon a time " * 10},
                    ]
                }
            ]
        )
    )
    spec = LoadSpec(concurrency=1, dataset_path=str(sg), output_tokens_dist={"kind": "dataset"})
    it = Workload(spec).item(0)
    assert it.prompt == "Tell me a story" and it.output_tokens > 10


def test_random_range_ratio_is_vllm_bench_serves():
    """random_range_ratio r draws lengths uniformly over [floor(L(1 - r)), ceil(L(1 + r))], both ends, as vllm bench
    serve's random dataset; prompts only when synthetic; an explicit *_tokens_dist wins; r = 0 keeps one length."""
    spec = LoadSpec(concurrency=4, input_tokens=512, output_tokens=127, random_range_ratio=0.5, seed=3)
    w = Workload(spec, n_hint=4000)
    ins, outs = zip(*(w.lengths(i) for i in range(4000)))
    assert (min(ins), max(ins)) == (256, 768) and (min(outs), max(outs)) == (63, 191)
    assert abs(np.mean(outs) - 127) < 2
    assert {len(w.item(i).prompt.split(" ")) for i in range(20)} != {512}  # the prompts follow the drawn lengths
    fixed = Workload(LoadSpec(concurrency=4, input_tokens=512, output_tokens=128))
    assert {fixed.lengths(i) for i in range(50)} == {(512, 128)}
    explicit = LoadSpec(concurrency=1, output_tokens_dist={"kind": "fixed", "value": 7}, random_range_ratio=0.5)
    assert {Workload(explicit).lengths(i)[1] for i in range(50)} == {7}
    assert Workload(LoadSpec(concurrency=1, output_tokens=1, random_range_ratio=0.9)).lengths(0)[1] >= 1
    for bad in (1.0, -0.1):
        with pytest.raises(LoadSpecError, match="random_range_ratio"):
            LoadSpec.from_dict({"concurrency": 1, "random_range_ratio": bad})
