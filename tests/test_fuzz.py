"""Fuzzing with hypothesis (derandomized): random graphs through `parplan analyze|propose`,
random rule files built from the schema through load + analyze + propose, and random
clusters, models and batches through the planner and the renderer.

Whatever the input, the only exceptions are ParplanError subclasses (the CLI turns them into
one line and exit 1 or 2), and every output keeps its invariants: strict JSON (no NaN or
Infinity), dp*tp*pp*cp = world size, mbs*grad_accum*dp = global batch, rendered JSON parses.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import parplan_gen.rules.ruleset
from parplan_gen.api import plan
from parplan_gen.cli.main import main
from parplan_gen.cost.hardware import cluster_from_flags
from parplan_gen.inputs.errors import FormulaError, ParplanError
from parplan_gen.models.graph import load_graph
from parplan_gen.render.plan_files import render_plan
from parplan_gen.rules.engine import analyze, propose
from parplan_gen.rules.ruleset import load_rules
from parplan_gen.rules.schema import RuleFile

REPO = Path(__file__).resolve().parent.parent
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
OPPORTUNITY_TYPES = {"DataParallel", "ModelParallel", "PipelineParallel", "TensorParallel"}
PROPOSAL_TYPES = OPPORTUNITY_TYPES - {"ModelParallel"} | {
    "CommunicationOptimization",
    "MemoryOptimization",
}
BUILTIN_RULES = load_rules()
_load_rules = functools.lru_cache(maxsize=None)(lambda dirs: load_rules(list(dirs)))


def strict_json(text: str) -> Any:
    """json.loads that refuses NaN and Infinity (which are not JSON)."""

    def refuse(token: str) -> Any:
        raise AssertionError(f"{token} in JSON output")

    return json.loads(text, parse_constant=refuse)


def run_cli(*argv: str) -> tuple[int, str, str]:
    """main(argv) with the built-in rules loaded once (they do not change between runs)."""
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch.object(
            parplan_gen.rules.ruleset, "load_rules", lambda d=(): _load_rules(tuple(d))
        ),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def assert_one_line_error(code: int, out: str, err: str) -> None:
    assert code in (1, 2), err
    assert out == ""
    assert err.startswith("parplan: error: ") and err.count("\n") == 1 and err.endswith("\n")


# ---- random graphs ---------------------------------------------------------------------------

OPS = ["MatMul", "Compute::MatMul", "Conv2d", "Activation", "BatchNorm", "Embedding", "Softmax"]
ATTR_VALUES = (
    st.integers(0, 10**12) | st.floats(0, 1e12, allow_nan=False) | st.sampled_from(["relu", True])
)
FLAWS = ["cycle", "self_loop", "dangling", "duplicate", "malformed_edge", "no_op"]


@st.composite
def graphs(draw: st.DrawFn) -> tuple[dict[str, Any], str | None]:
    """A graph file's data and its flaw (None: a valid graph)."""
    n = draw(st.integers(0, 12))
    nodes: list[dict[str, Any]] = []
    for i in range(n):
        node: dict[str, Any] = {"id": f"n{i}", "op": draw(st.sampled_from(OPS))}
        for attr in draw(st.lists(st.sampled_from(["flops", "params", "fn"]), unique=True)):
            node[attr] = draw(ATTR_VALUES)
        nodes.append(node)
    pairs = st.tuples(st.integers(0, max(n - 1, 0)), st.integers(0, max(n - 1, 0)))
    edges = sorted(
        {(min(a, b), max(a, b)) for a, b in draw(st.lists(pairs, max_size=20)) if a != b}
    )
    data: dict[str, Any] = {"name": "fuzz", "nodes": nodes}
    data["edges"] = [[f"n{a}", f"n{b}"] for a, b in edges]
    flaw = draw(st.sampled_from([None, None, None, *FLAWS])) if n >= 2 else None
    if flaw == "cycle":
        a, b = draw(st.sampled_from(edges)) if edges else (0, 1)
        data["edges"] += [[f"n{a}", f"n{b}"], [f"n{b}", f"n{a}"]]
    elif flaw == "self_loop":
        data["edges"].append(["n0", "n0"])
    elif flaw == "dangling":
        data["edges"].append(["n0", "ghost"])
    elif flaw == "duplicate":
        nodes[-1]["id"] = "n0"
    elif flaw == "malformed_edge":
        data["edges"].append(["n0"])
    elif flaw == "no_op":
        del nodes[0]["op"]
    return data, flaw


def check_analysis(opportunities: list[dict[str, Any]], ids: set[str]) -> None:
    """Highest speedup first, one entry per node, every node known (or a graph-level id)."""
    speedups = [o["estimated_speedup"] for o in opportunities]
    assert speedups == sorted(speedups, reverse=True)
    reported = [o["node_id"] for o in opportunities]
    assert len(reported) == len(set(reported))
    assert set(reported) <= ids | {"pipeline_stages", "whole_graph"}
    for o in opportunities:
        assert o["type"] in OPPORTUNITY_TYPES
        assert isinstance(o["resource_requirements"]["memory_per_device"], int)
        assert isinstance(o["resource_requirements"]["min_devices"], int)


@settings(FUZZ, max_examples=60)
@given(
    graph=graphs(),
    as_json=st.booleans(),
    devices=st.integers(1, 64),
)
def test_random_graphs_through_analyze_and_propose(graph, as_json, devices):
    data, flaw = graph
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / ("g.json" if as_json else "g.yaml")
        path.write_text(json.dumps(data), encoding="utf-8")  # JSON is also YAML
        analysis = run_cli("analyze", str(path), "--json")
        proposals = run_cli("propose", str(path), "--devices", str(devices), "--json")
        text = run_cli("analyze", str(path))
    if flaw is not None:
        for run in (analysis, proposals, text):
            assert_one_line_error(*run)
        return
    for code, _, err in (analysis, proposals, text):
        assert code == 0, err
    check_analysis(strict_json(analysis[1])["opportunities"], {n["id"] for n in data["nodes"]})
    for p in strict_json(proposals[1])["proposals"]:
        assert p["type"] in PROPOSAL_TYPES
        assert isinstance(p["settings"], dict) and isinstance(p["description"], str)


# ---- random rule files -------------------------------------------------------------------------

NUMBER_NAMES = {
    "node": ["graph.node_count", "graph.depth", "node.in_degree", "node.level", "node.attr.flops"],
    "graph": ["graph.node_count", "graph.edge_count", "graph.depth", "graph.op_count.MatMul"],
    "proposal": ["graph.node_count", "graph.depth", "cluster.devices", "graph.sum.params"],
}


@functools.cache
def numbers(context: str, named: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Number formulas over the names of `context` (and named formulas), small enough that
    nothing overflows a float: exponents are 0 to 3."""
    leaves = (
        st.integers(-100, 100).map(str)
        | st.floats(-100, 100, allow_nan=False).map(lambda x: f"{x:.3g}")
        | st.sampled_from(NUMBER_NAMES[context] + list(named))
    )

    def extend(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        ops = st.sampled_from(["+", "-", "*", "/", "//", "%"])
        binary = st.tuples(children, ops, children).map(lambda t: f"({t[0]} {t[1]} {t[2]})")
        power = st.tuples(children, st.integers(0, 3)).map(lambda t: f"({t[0]} ** {t[1]})")
        one = st.tuples(st.sampled_from(["ceil", "floor", "abs", "log2"]), children)
        two = st.tuples(st.sampled_from(["min", "max"]), children, children)
        three = st.tuples(st.just("clamp"), children, children, children)
        calls = (one | two | three).map(lambda t: f"{t[0]}({', '.join(t[1:])})")
        return binary | power | calls

    return st.recursive(leaves, extend, max_leaves=6)


@functools.cache
def conditions(context: str, named: tuple[str, ...]) -> st.SearchStrategy[str | bool]:
    compare = st.tuples(numbers(context, named), st.sampled_from(["<", ">=", "==", "!="])).map(
        lambda t: f"{t[0]} {t[1]} 3"
    )
    guarded = st.just("node.has.flops and node.attr.flops > 1") if context == "node" else compare
    return st.booleans() | compare | guarded


@st.composite
def rule_files(draw: st.DrawFn) -> str:
    """A rule file that follows the schema, with random formulas in every field."""
    named = tuple(f"nf{i}" for i in range(draw(st.integers(0, 3))))
    data: dict[str, Any] = {
        "formulas": {n: draw(numbers("graph", named[:i])) for i, n in enumerate(named)},
        "opportunities": [],
        "proposals": [],
    }
    for i in range(draw(st.integers(0, 3))):
        scope = draw(st.sampled_from(["node", "graph"]))
        rule: dict[str, Any] = {
            "id": f"fuzz.o{i}",
            "type": draw(st.sampled_from(sorted(OPPORTUNITY_TYPES))),
            "when": draw(conditions(scope, named)),
        }
        if scope == "node":
            rule["op"] = draw(st.sampled_from(["MatMul", "Conv2d", "Activation", "*"]))
        else:
            rule |= {"scope": "graph", "node_id": "whole_graph"}
        for field in ("min_devices", "memory_per_device", "communication_overhead", "speedup"):
            rule[field] = draw(numbers(scope, named))
        data["opportunities"].append(rule)
    for i in range(draw(st.integers(0, 3))):
        settings_ = {
            f"s{k}": draw(numbers("proposal", named)) for k in range(draw(st.integers(0, 2)))
        }
        placeholder = draw(
            st.sampled_from(["", " {speedup:.2f}x"] + [f" {{settings.{k}}}" for k in settings_])
        )
        data["proposals"].append(
            {
                "id": f"fuzz.p{i}",
                "group": draw(st.sampled_from(["data", "pipeline", "memory"])),
                "type": draw(st.sampled_from(sorted(PROPOSAL_TYPES))),
                "when": draw(conditions("proposal", named)),
                "speedup": draw(numbers("proposal", named)),
                "settings": settings_,
                "description": "fuzzed" + placeholder,
            }
        )
    return json.dumps(data)


GRAPHS = [
    load_graph(REPO / "examples" / name) for name in ("transformer_block.yaml", "cnn_block.yaml")
]


@settings(FUZZ, max_examples=100)
@given(text=rule_files(), devices=st.integers(1, 16))
def test_random_rule_files_through_load_analyze_and_propose(text, devices):
    RuleFile.model_validate(json.loads(text))  # the generator follows the schema
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "rules.yaml").write_text(text, encoding="utf-8")
        try:
            rules = load_rules([folder], builtin=False)
        except ParplanError:
            event("refused at load")
            return  # a type error or a constant that fails (e.g. 1 // 0), found at load
    for graph in GRAPHS:
        try:
            found = analyze(graph, rules)
            made = propose(graph, rules, devices)
        except FormulaError:
            continue  # a formula that fails on this graph (division by zero, log2(-1), ...)
        check_analysis(
            strict_json(json.dumps([o.as_dict() for o in found])),
            {n.id for n in graph.nodes},
        )
        for p in strict_json(
            json.dumps([p.model_dump(exclude={"rule_id", "group"}) for p in made])
        ):
            assert p["type"] in PROPOSAL_TYPES


# ---- random clusters, models and batches through the planner -----------------------------------

PRESETS = ["megatron-gpt-1.7b", "llama-2-7b", "llama-3-8b", "mixtral-8x7b", "qwen3-30b-a3b"]
GPUS = ["a100-40gb", "a100-80gb", "h100", "h200", "b200", "mi300x", "v100-32gb", "l40s"]


@settings(FUZZ, max_examples=30)
@given(
    model=st.sampled_from(PRESETS),
    gpu=st.sampled_from(GPUS),
    gpus=st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 32, 64]),
    per_node=st.sampled_from([4, 8]),
    batch=st.integers(1, 512),
    seq_len=st.sampled_from([512, 2048, 4096]),
    precision=st.sampled_from(["bf16", "fp16", "fp8"]),
    backend=st.sampled_from(["any", "megatron", "deepspeed"]),
)
def test_random_requests_through_the_planner(
    model, gpu, gpus, per_node, batch, seq_len, precision, backend
):
    try:
        cluster = cluster_from_flags(gpus, gpu, gpus_per_node=per_node)
        result = plan(
            model, cluster, global_batch=batch, seq_len=seq_len, precision=precision,
            backend=backend, rules=BUILTIN_RULES,
        )  # fmt: skip
    except ParplanError as exc:
        event(f"refused: {type(exc).__name__}")
        return
    r = result.document
    event(f"planned, feasible={result.feasible}")
    for estimate in [r.chosen, *r.candidates]:
        p = estimate.plan
        assert p.dp * p.tp * p.pp * p.cp == gpus
        assert p.mbs * p.grad_accum * p.dp == batch == p.global_batch
        # the expert groups tile a stage (parallel_state); ep within dp off Megatron
        assert (p.tp * p.cp * p.dp) % (p.etp * p.ep) == 0
        if estimate.backend is None or estimate.backend.name != "megatron":
            assert p.dp % p.ep == 0 and p.etp == p.tp
    strict_json(json.dumps(r.contract()))
    if not result.feasible:
        return
    try:
        files = render_plan(r)
    except ParplanError as exc:  # e.g. seq_len beyond a learned position table (reported)
        assert "position table" in str(exc)
        return
    assert strict_json(files["plan.json"])["chosen"]["plan"] == r.chosen.plan.model_dump(
        mode="json"
    )
    own = {"deepspeed": "ds_config.json", "megatron": "megatron_args.sh"}
    if r.chosen.backend.name in own:  # the chosen backend's file is always written
        assert own[r.chosen.backend.name] in files
    if "ds_config.json" in files:  # DeepSpeed runs the layout too
        config = strict_json(files["ds_config.json"])
        assert config["train_batch_size"] == batch
