"""What every rendered file must satisfy before it is written, and the error when it does not.

`check_files` parses each file back the way its consumer will: JSON (ds_config.json's batch
identity, plan.json's round trip), `bash -n` for scripts, NCCL's documented variables and value
grammar for nccl.env (templates/nccl/nccl_env.yaml, a copy of shared/reference/nccl_env.yaml),
DeepSpeed's hostfile grammar, well-formed SVG, Python's grammar for a .py file (torchtitan's
config function, which torchtitan_run.sh must name). Lines are split as bash and Python's file
reader split them, at `\n` only; a text file (anything but JSON, which escapes them) may hold no other
control, format or line-break character (safe_text.printable's set) but the tab, so no reader
sees a line break that another does not.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from parplan_gen.inputs.defaults import ZERO_STAGES
from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.key_path import format_path
from parplan_gen.inputs.safe_text import printable
from parplan_gen.inputs.source import load_document, parse_document

BASH_CHECK_TIMEOUT_S = 30  # `bash -n` parses a short script in milliseconds
# The characters of an nccl.env value: inert when bash sources the file (no blank, quote, `$`,
# backquote, `;`, `|`, `&`, `#`, `~`, glob or redirection) and read as written by
# `docker run --env-file`, which cannot unquote. So NCCL's `;` lists (per-function NCCL_ALGO)
# and `|` lists (NCCL_CTA_POLICY) cannot be written: bash would run what follows as a command.
ENV_VALUE_SET = "A-Za-z0-9_.,:^=/@+-"
ENV_VALUE = re.compile(f"[{ENV_VALUE_SET}]*")
ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")
ENV_ASSIGNMENT = re.compile(rf"^({ENV_NAME.pattern})=(.*)$")
ENV_COMMENTED = re.compile(rf"^#\s*({ENV_NAME.pattern})=(\S*)\s*$")
LINE_BREAK = "\n"  # the only line break bash splits on (check_characters refuses the others)
TEXT_CONTROLS = "\t\n"  # the control characters a rendered text file may hold
_MAYBE_UNSAFE = re.compile(r"[^\t\n\x20-\x7e]")  # plain ASCII text needs no closer look
HOSTFILE_LINE = re.compile(r"^(\S+)\s+slots=(\d+)")  # deepspeed/launcher/runner.py _parse_hostfile
TORCHTITAN_DP = re.compile(r"--parallelism\.data_parallel_(replicate|shard)_degree (\d+)")
TORCHTITAN_CONFIG = re.compile(r"^\s*--module (\S+)\n\s*--config (\S+)$", re.MULTILINE)
SVG_TAG = "{http://www.w3.org/2000/svg}svg"
AUTO = "auto"
COMMUNICATION_TYPES = ("fp16", "bf16", "fp32")  # deepspeed/runtime/config.py
ZERO_GRADS_STAGE = 2  # ZeRO-2 shards gradients: DeepSpeed's pipeline engine refuses it
ACCELERATE_CONFIG = "accelerate_config.yaml"  # accelerate_launch.sh reads it beside itself
# accelerate 1.16.0 parallelism_config.py: the sizes whose product is total_size (sp_size, not
# written, is 1).
ACCELERATE_SIZES = ("dp_replicate", "dp_shard", "tp", "cp")


class RenderError(InputError):
    """A template, the mapping, or a file rendered from them is wrong; its author must fix it."""


def check_files(files: Mapping[str, str], *, nccl_reference: Path) -> None:
    """Parse every file back; raise RenderError naming the first file that its consumer refuses."""
    plan = _plan_facts(files)
    for name in sorted(files):
        text = files[name]
        try:
            _check_one(name, text, plan, nccl_reference)
        except RenderError as exc:
            where = exc.where or SourceRef(name)
            raise RenderError(f"rendered {name} is invalid: {exc.message}", where) from None
    _check_config_module(files)


def _check_config_module(files: Mapping[str, str]) -> None:
    """A torchtitan_run.sh whose --module is a file of the plan (its config function,
    torchtitan config/manager.py imports it by name) names a function that file defines."""
    named = TORCHTITAN_CONFIG.search(files.get("torchtitan_run.sh", ""))
    if named is None or f"{named[1]}.py" not in files:
        return
    tree = ast.parse(files[f"{named[1]}.py"])  # parsed already (check_python)
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    if named[2] not in functions:
        raise RenderError(
            f"rendered torchtitan_run.sh is invalid: --config {named[2]} is no function of "
            f"{named[1]}.py (it has {', '.join(sorted(functions)) or 'none'})",
            SourceRef("torchtitan_run.sh"),
        )


def _check_one(name: str, text: str, plan: dict[str, Any], nccl_reference: Path) -> None:
    if name.endswith(".json"):
        data = _json(text)
        if name == "ds_config.json":
            check_ds_config(data, plan.get("dp"))
        elif name == "plan.json":
            _check_plan_json(text)
        return
    check_characters(text)
    if name.endswith((".sh", ".sbatch")):
        check_bash(text)
        if name == "torchtitan_run.sh":
            check_torchtitan(text, plan.get("dp"))
    elif name.endswith(".env"):
        check_env(text, nccl_reference)
    elif name == ACCELERATE_CONFIG:
        check_accelerate(text, plan.get("dp"), plan.get("gpus"))
    elif name == "hostfile":
        check_hostfile(text, plan.get("nodes"), plan.get("slots"))
    elif name.endswith(".svg"):
        check_svg(text)
    elif name.endswith(".py"):
        check_python(text)


def _plan_facts(files: Mapping[str, str]) -> dict[str, Any]:
    """dp, nodes and GPUs per node from plan.json, when the files include it."""
    if "plan.json" not in files:
        return {}
    data = _json(files["plan.json"])
    try:
        cluster = data["cluster"]
        nodes = max(1, cluster["num_gpus"] // cluster["gpus_per_node"])
        slots = min(cluster["num_gpus"], cluster["gpus_per_node"])
        gpus = cluster["num_gpus"]
        return {"dp": data["chosen"]["plan"]["dp"], "nodes": nodes, "slots": slots, "gpus": gpus}
    except (KeyError, TypeError) as exc:
        raise RenderError(f"rendered plan.json lacks {exc}", SourceRef("plan.json")) from None


def _json(text: str) -> Any:
    def no_constant(token: str) -> Any:
        raise RenderError(f"{token} is not valid JSON")

    try:
        return json.loads(text, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise RenderError(f"not JSON: {exc.msg} at line {exc.lineno}") from None


def check_ds_config(config: Any, dp: int | None) -> None:
    """DeepSpeed's own start-up checks: batch identity, one 16-bit mode, a valid ZeRO stage."""
    if not isinstance(config, dict):
        raise RenderError("a DeepSpeed config is a JSON object")
    batch = [config.get(k) for k in ("train_batch_size", "train_micro_batch_size_per_gpu")]
    accum = config.get("gradient_accumulation_steps")
    values = [*batch, accum]
    if AUTO not in values:
        sizes = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0]
        if len(sizes) != len(values):
            raise RenderError(f"batch sizes must be positive integers (got {values})")
        total, micro, accum = sizes
        ranks = dp if dp is not None else total // (micro * accum)
        if total != micro * accum * ranks:
            raise RenderError(
                f"train_batch_size({total}) != train_micro_batch_size_per_gpu({micro}) * "
                f"gradient_accumulation_steps({accum}) * data-parallel size({ranks})"
            )
    enabled = [k for k in ("bf16", "fp16") if (config.get(k) or {}).get("enabled") is True]
    if len(enabled) > 1:
        raise RenderError("bf16 and fp16 modes cannot both be enabled (DeepSpeedConfig)")
    comm = config.get("communication_data_type")
    if comm is not None and comm not in COMMUNICATION_TYPES:
        raise RenderError(f"communication_data_type must be one of {COMMUNICATION_TYPES}")
    stage = (config.get("zero_optimization") or {}).get("stage", 0)
    if stage not in ZERO_STAGES:
        raise RenderError(f"zero_optimization.stage must be 0..3 (got {stage!r})")
    if stage >= ZERO_GRADS_STAGE and "pipeline" in config:
        raise RenderError("ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism")


def _check_plan_json(text: str) -> None:
    from parplan_gen.planning.document import PlanDocument

    try:
        doc = PlanDocument.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]  # one line, not pydantic's report
        where = f"{format_path(tuple(first['loc']))}: " if first["loc"] else ""
        raise RenderError(f"does not read back as a plan: {where}{first['msg']}") from None
    if doc.to_json() != text:
        raise RenderError("does not read back to the same bytes")


def check_characters(text: str) -> None:
    """No control, format or line-break character but tab and `\\n` (RenderError at the first)."""
    for match in _MAYBE_UNSAFE.finditer(text):
        char = match.group()
        if char not in TEXT_CONTROLS and printable(char) != char:
            line = text.count(LINE_BREAK, 0, match.start()) + 1
            column = match.start() - (text.rfind(LINE_BREAK, 0, match.start()) + 1) + 1
            raise RenderError(
                f"line {line}, column {column}: character {printable(char)} (only tab and "
                "newline may break plain text: readers disagree on the others)"
            )


def check_bash(text: str) -> None:
    """`bash -n`: the script parses (skipped where bash is not installed)."""
    bash = shutil.which("bash")
    if bash is None:
        return
    done = subprocess.run(
        [bash, "-n"],
        input=text,
        capture_output=True,
        text=True,
        timeout=BASH_CHECK_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0:
        raise RenderError(f"bash -n: {done.stderr.strip()}")


def check_torchtitan(text: str, dp: int | None) -> None:
    """torchtitan_run.sh names its config and spans the plan's data-parallel ranks:
    data_parallel_replicate_degree x data_parallel_shard_degree = dp (torchtitan 0.3
    distributed/parallel_dims.py ParallelDims._validate multiplies them with cp, tp and pp to
    the world size), one of them 1 (both > 1 is HSDP, which no plan is)."""
    if not TORCHTITAN_CONFIG.search(text):
        raise RenderError("no --module/--config: torchtitan 0.3 starts a job from its config")
    degrees = {k: int(v) for k, v in TORCHTITAN_DP.findall(text)}
    if len(degrees) != 2 or min(degrees.values()) != 1:
        raise RenderError(f"expected one data-parallel degree > 1 at most, got {degrees}")
    if dp is not None and degrees["replicate"] * degrees["shard"] != dp:
        raise RenderError(f"data-parallel degrees {degrees} do not make dp {dp}")


def check_accelerate(text: str, dp: int | None, gpus: int | None) -> None:
    """accelerate_config.yaml is a YAML mapping for FSDP2 whose parallelism config spans its
    num_processes, the plan's GPUs (accelerate 1.16.0 parallelism_config.py
    ParallelismConfig._validate_accelerator: total_size == num_processes), with dp_replicate x
    dp_shard = dp."""
    try:
        data = parse_document(text, ACCELERATE_CONFIG).data
    except InputError as exc:
        raise RenderError(f"not YAML: {exc.message}") from None
    if not isinstance(data, dict) or data.get("distributed_type") != "FSDP":
        raise RenderError("expected a YAML mapping with distributed_type FSDP")
    if (data.get("fsdp_config") or {}).get("fsdp_version") != 2:
        raise RenderError("expected fsdp_config.fsdp_version 2 (FSDP2)")
    processes = data.get("num_processes")
    section = data.get("parallelism_config") or {}
    # each size the launcher's default, 1; no parallelism config: FSDP2 over every process
    sizes = {k: section.get(f"parallelism_config_{k}_size", 1) for k in ACCELERATE_SIZES}
    if not section:
        sizes["dp_shard"] = processes
    if not all(isinstance(v, int) and v >= 1 for v in sizes.values()):
        raise RenderError(f"parallelism sizes {sizes} are not whole numbers from 1")
    total = sizes["dp_replicate"] * sizes["dp_shard"] * sizes["tp"] * sizes["cp"]
    if processes != total or (gpus is not None and processes != gpus):
        raise RenderError(f"num_processes {processes} is not the parallelism sizes {sizes}'s")
    if dp is not None and sizes["dp_replicate"] * sizes["dp_shard"] != dp:
        raise RenderError(f"data-parallel sizes {sizes} do not make dp {dp}")


def check_python(text: str) -> None:
    """Python's grammar: the file parses (`ast.parse`; nothing in it is run)."""
    try:
        ast.parse(text)
    except SyntaxError as exc:
        raise RenderError(f"line {exc.lineno}: Python syntax: {exc.msg}") from None


def check_hostfile(text: str, nodes: int | None, slots: int | None) -> None:
    """DeepSpeed's hostfile grammar (`HOST slots=N`, '#' comments), one line per node."""
    hosts: dict[str, int] = {}
    for number, raw in enumerate(text.split(LINE_BREAK), start=1):
        line = raw.strip(" \t")  # the blanks of bash
        if not line or line.startswith("#"):
            continue
        match = HOSTFILE_LINE.search(line)
        if match is None or match.group(1) in hosts:
            raise RenderError(f"line {number}: bad or repeated entry '{printable(line)}'")
        hosts[match.group(1)] = int(match.group(2))
    if not hosts:
        raise RenderError("no host lines")
    if nodes is not None and len(hosts) != nodes:
        raise RenderError(f"{len(hosts)} hosts for a plan on {nodes} nodes")
    if slots is not None and set(hosts.values()) != {slots}:
        raise RenderError(f"slots must be {slots} (GPUs per node) on every host")


def check_svg(text: str) -> None:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise RenderError(f"not well-formed XML: {exc}") from None
    if root.tag != SVG_TAG:
        raise RenderError(f"root element is {root.tag}, not an SVG image")


# ---- nccl.env -------------------------------------------------------------------------------


@cache
def nccl_reference(path: Path) -> dict[str, Any]:
    """The documented NCCL variables (and related ones), loaded once per path."""
    data = load_document(path).data
    variables = {name: spec for name, spec in data["variables"].items() if "removed_in" not in spec}
    return {
        "variables": {**variables, **data.get("related", {})},
        "aliases": data.get("aliases", {}),
        "legacy": data.get("pytorch_legacy", {}).get("names", {}),
    }


def check_env(text: str, reference: Path) -> None:
    """Only documented variables with valid values; every assignment below its comment."""
    ref = nccl_reference(reference)
    seen: set[str] = set()
    previous = ""
    for number, raw in enumerate(text.split(LINE_BREAK), start=1):
        line = raw.strip(" \t")  # the blanks of bash
        commented = ENV_COMMENTED.match(line)
        assigned = commented or ENV_ASSIGNMENT.match(line)
        if assigned is None and line and not line.startswith("#"):
            raise RenderError(f"line {number}: not NAME=VALUE or a comment: '{printable(line)}'")
        if assigned is not None:
            name, value = assigned.group(1), assigned.group(2)
            if not previous.startswith("#") or ENV_COMMENTED.match(previous):
                raise RenderError(f"line {number}: {name} has no comment saying who set it")
            if not commented:
                if name in seen:
                    raise RenderError(f"line {number}: {name} is set twice")
                seen.add(name)
            problem = env_problem(name, value, ref)
            if problem:
                raise RenderError(f"line {number}: {name}={printable(value)}: {problem}")
        previous = line


def env_problem(name: str, value: str, ref: dict[str, Any]) -> str | None:
    """Why NAME=VALUE is not a documented NCCL setting, or None."""
    if name in ref["aliases"]:
        return f"a deprecated alias; use {ref['aliases'][name]['alias_of']}"
    if name in ref["legacy"]:
        return f"read by PyTorch, not NCCL; use {ref['legacy'][name]}"
    spec = ref["variables"].get(name)
    if spec is None:
        return "not a documented NCCL variable (shared/reference/nccl_env.yaml)"
    if not ENV_VALUE.fullmatch(value):
        return f"characters outside [{ENV_VALUE_SET}] (unsafe to source)"
    check = _VALUE_CHECKS.get(spec["type"])
    if check is None or check(value, spec):
        return None
    return f"not a valid {spec['type']} value"


def _int(value: str, spec: dict[str, Any]) -> bool:
    if not re.fullmatch(r"-?[0-9]+", value):  # ASCII: int() would also read "١٢"
        return False
    number = int(value)
    return spec.get("min", number) <= number <= spec.get("max", number)


def _uint(value: str, spec: dict[str, Any]) -> bool:
    return bool(re.fullmatch(r"[0-9]+|0[xX][0-9a-fA-F]+", value))


def _in(value: str, spec: dict[str, Any]) -> bool:
    values = [str(v) for v in spec.get("values", [])]
    if spec.get("case_insensitive"):
        return value.upper() in {v.upper() for v in values}
    return value in values


def _path_level(value: str, spec: dict[str, Any]) -> bool:
    return _in(value, spec) or (value.isascii() and value.isdigit())


def _flag_list(value: str, spec: dict[str, Any]) -> bool:
    if not value:
        return bool(spec.get("empty_ok"))
    items = value.removeprefix("^").split(",")
    if spec.get("caret") == "per_item":
        items = [item.removeprefix("^") for item in items]
    return all(_in(item, {**spec, "case_insensitive": True}) for item in items)


def _func_list(value: str, spec: dict[str, Any]) -> bool:
    functions = {f.upper() for f in spec.get("functions", [])}
    for part in value.split(";"):
        func, _, items = part.rpartition(":")
        if func and func.upper() not in functions:
            return False
        names = items.removeprefix("^").split(",")
        if not all(_in(n, {**spec, "case_insensitive": True}) for n in names):
            return False
    return True


def _iface_list(value: str, spec: dict[str, Any]) -> bool:
    item = r"[A-Za-z0-9_.-]+(:\d+)?"
    return bool(re.fullmatch(rf"\^?=?{item}(,{item})*", value))


def _hca_list(value: str, spec: dict[str, Any]) -> bool:
    item = r"[A-Za-z0-9_.-]+(:\d+){0,3}"
    return bool(re.fullmatch(rf"\^?=?{item}(,{item})*", value))


def _cidr(value: str, spec: dict[str, Any]) -> bool:
    import ipaddress

    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        return False
    return True


def _host_port(value: str, spec: dict[str, Any]) -> bool:
    return bool(re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):\d+", value))


def _cta_policy(value: str, spec: dict[str, Any]) -> bool:
    if value in {str(v) for v in spec.get("legacy_int", [])}:
        return True
    return all(_in(part, spec) for part in value.split("|"))


def _netdevs_policy(value: str, spec: dict[str, Any]) -> bool:
    return value in ("AUTO", "ALL") or bool(re.fullmatch(r"MAX:\d+", value))


def _nonempty(value: str, spec: dict[str, Any]) -> bool:
    return bool(value)


def _path(value: str, spec: dict[str, Any]) -> bool:
    return bool(value) and "~" not in value


_VALUE_CHECKS = {
    "bool01": lambda value, spec: value in ("0", "1"),
    "int": _int,
    "uint": _uint,
    "enum": _in,
    "path_level": _path_level,
    "flag_list": _flag_list,
    "func_list": _func_list,
    "iface_list": _iface_list,
    "hca_list": _hca_list,
    "cidr": _cidr,
    "host_port": _host_port,
    "cta_policy": _cta_policy,
    "netdevs_policy": _netdevs_policy,
    "string": _nonempty,
    "path": _path,
}
