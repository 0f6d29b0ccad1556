"""Hostile sizes, figures and names (tests/hostile/sizes*.yaml) through the real command line.

Each case is refused with exit 1 (bad input) or 2 (bad usage), one line on stderr that holds
no control character and is bounded in length, nothing on stdout and nothing written (the
defects were tracebacks and runs of minutes: a run that never ends fails at the hang guard,
hostile_support.HANG_S). The Python API refuses the same sizes with the same words. How long
each case takes is printed by `python benchmarks/hostile_speed.py`, not asserted here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

import parplan_gen
import parplan_gen.api
import parplan_gen.rules.ruleset
from parplan_gen.cost.layout import MAX_GLOBAL_BATCH, MAX_SEQ_LEN, Layout, build_layout
from parplan_gen.inputs import errors
from parplan_gen.inputs.errors import InputError, ParplanError
from parplan_gen.planning.search_space import divisors, prime_factors

from hostile_support import (
    HOSTILE,
    PREFIX,
    hang_guard,
    refused_in_one_line,
)

CASES: list[dict[str, Any]] = [
    case
    for path in sorted(HOSTILE.glob("sizes*.yaml"))
    for case in YAML(typ="safe").load(path.read_text(encoding="utf-8"))
]
LONGEST_LINE = (
    len(PREFIX) + errors.SHOWN_PLACE_CHARS + errors.SHOWN_MESSAGE_CHARS + 200
)  # place, message, the `: key.path: ` between them and the "more characters" notes


def snapshot(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*"))}


def test_the_corpus_is_large_and_well_formed() -> None:
    ids = [case["id"] for case in CASES]
    assert len(ids) == len(set(ids)), "duplicate case ids"
    assert len(CASES) >= 60
    assert {i.split(".")[0] for i in ids} == {
        "flags", "cluster", "hf", "megatron", "deepspeed", "names",
    }  # fmt: skip
    for case in CASES:
        assert set(case) in (
            {"id", "argv", "exit", "stderr"},
            {"id", "files", "argv", "exit", "stderr"},
        ), case["id"]
        assert case["exit"] in (1, 2), case["id"]


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_hostile_input_is_refused_at_once_in_one_line(case, tmp_path, monkeypatch, capsys):
    line = refused_in_one_line(case, tmp_path, monkeypatch, capsys)
    assert len(line) <= LONGEST_LINE


# ---- the same bounds through the Python API ---------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (
            {"global_batch": 2**62},
            "global_batch: expected a whole number from 1 to 536870912, got 4611686018427387904",
        ),
        (
            {"global_batch": 10**5000},
            "global_batch: expected a whole number from 1 to 536870912, got 10^5000",
        ),
        (
            {"global_batch": 8, "seq_len": -(10**400)},
            "seq_len: expected a whole number from 1 to 16777216, got -10^400",
        ),
        (
            {"global_batch": 8.0},
            "global_batch: expected a whole number from 1 to 536870912, got 8.0",
        ),
        (
            {"global_batch": True},
            "global_batch: expected a whole number from 1 to 536870912, got True",
        ),
        (
            {"global_batch": 8, "seq_len": "8"},
            "seq_len: expected a whole number from 1 to 16777216, got '8'",
        ),
        ({"global_batch": 8, "top": 0}, "top: expected a whole number >= 1, got 0"),
        (
            {"global_batch": 8, "objective": "speed"},
            "objective: expected one of time, memory, got 'speed'",
        ),
        (
            {"global_batch": 8, "precision": "fp32"},
            "precision: expected one of bf16, fp16, fp8, got 'fp32'",
        ),
        (
            {"global_batch": 8, "backend": "jax"},
            "backend: expected one of megatron, deepspeed, ddp, torchtitan, accelerate, any, got 'jax'",
        ),
    ],
)
def test_the_api_refuses_bad_sizes_and_options(request_, message):
    with pytest.raises(InputError) as info:
        parplan_gen.plan("llama-3-8b", {"gpus": 8, "gpu": "h100"}, **request_)
    assert info.value.render() == message


def test_the_api_cluster_dict_is_checked_like_the_flags():
    with pytest.raises(ParplanError) as info:
        parplan_gen.plan(
            "llama-3-8b", {"gpus": 16, "gpu": "h100", "inter_node_gbps": 1e308}, global_batch=16
        )
    assert info.value.render() == (
        "inter_node_gbps: 1e+308 is outside the physical range 0.1 to 16000 "
        "(parplan_gen/data/networks.yaml ranges.gbps_per_gpu)"
    )


def test_a_layout_is_bounded_however_it_is_built():
    with pytest.raises(InputError, match=r"^tp: expected a whole number from 1 to 1048576, got"):
        build_layout(8, tp=2**62, global_batch=8, seq_len=8)
    with pytest.raises(ValueError, match="less than or equal to 536870912"):
        Layout(dp=1, tp=1, pp=1, cp=1, mbs=1, grad_accum=1, global_batch=2**30, seq_len=8)


def test_the_largest_sizes_are_planned():
    """The bounds themselves are usable: the largest batch at the longest sequence is planned
    (nothing fits; the advice is worked out too) before the hang guard stops it."""
    with hang_guard():
        found = parplan_gen.plan(
            "llama-3-8b",
            {"gpus": 8, "gpu": "h100"},
            global_batch=MAX_GLOBAL_BATCH,
            seq_len=MAX_SEQ_LEN,
        )
    assert (found.chosen.plan.global_batch, found.chosen.plan.seq_len) == (2**29, 2**24)
    assert not found.feasible and found.advice


# ---- divisors by factorisation ---------------------------------------------------------------


def test_divisors_come_from_the_prime_factors():
    assert len(divisors(367_567_200)) == 1152  # the most of any batch within MAX_GLOBAL_BATCH
    assert prime_factors(2**62) == {2: 62}
    assert prime_factors(536_870_909) == {536_870_909: 1}  # the largest prime under 2^29
    assert prime_factors(367_567_200) == {2: 5, 3: 3, 5: 2, 7: 1, 11: 1, 13: 1, 17: 1}
    assert divisors(1) == [1]
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(2**62) == [2**k for k in range(63)]  # trial division took minutes
    assert divisors(536_870_909) == [1, 536_870_909]
    brute = {n: [d for d in range(1, n + 1) if n % d == 0] for n in range(1, 400)}
    assert all(divisors(n) == found for n, found in brute.items())
