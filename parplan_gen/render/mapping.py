"""templates/mapping.yaml: canonical plan keys -> each backend's names, and the renderer's defaults.

This module owns the mapping's schema, reads it (with file:line errors), and applies it to the
canonical facts of one plan (`render_facts.facts`): the DeepSpeed config as nested JSON data, the
Megatron-LM argument groups, the nccl.env entries and the notes (the launchers' notes are what
an op-graph model's training script must do). Values are computed here or in
render_facts; the templates only format them.

A mapping file written before the `launch:` section existed (a `--templates` override) still
loads: without a `launch:` section the built-in mapping's is used, and its `master_port` is the
one the file names in a Megatron version's `data_env`, where it lived before. A file may name
the port in one place only. Templates read it as `launch.master_port` and, for a transformer's
plan, as `megatron.data_env.master_port` too: the same entry (`LoadedMapping.data_env`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from parplan_gen.inputs.errors import SourceRef
from parplan_gen.inputs.resources import shipped_dir
from parplan_gen.inputs.safe_text import printable
from parplan_gen.inputs.source import Document, KeyPath, load_document
from parplan_gen.inputs.validation import validate
from parplan_gen.planning.document import ProposalRecord
from parplan_gen.render.checks import RenderError
from parplan_gen.render.shell_quote import assignment
from parplan_gen.rules.vocabulary import ModelKind

MAPPING_FILE = "mapping.yaml"
MASTER_PORT = "master_port"  # launch.master_port; before the launch section, in data_env
COMMUNICATION = "communication"  # the proposal group whose settings concern NCCL
NOT_RENDERED = "not rendered"  # a proposal setting the mapping does not place
HF_AUTO = (
    "auto"  # what the Hugging Face Trainer fills in itself (transformers.integrations.deepspeed)
)
Scalar = bool | int | float | str
_PLACEHOLDER = re.compile(r"\{([a-z_]+\.[a-z_.]+)\}")
# megatron.script stands in a shell word of megatron_args.sh: a relative path of plain names.
SCRIPT_PATH = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Sourced(_Strict):
    key: str | None = Field(None, description="Canonical key whose value is written.")
    value: Scalar | None = Field(None, description="A constant the renderer adds.")
    when: str | None = Field(None, description="Canonical key: write the entry only when true.")
    source: str | None = Field(None, description="Where a constant comes from.")

    @model_validator(mode="after")
    def _one_value(self) -> _Sourced:
        if self.key is not None and self.value is not None:
            raise ValueError("give `key` or `value`, not both")
        if self.value is not None and not (self.source or "").strip():
            raise ValueError("a constant `value` names its `source`")
        return self


class DeepSpeedEntry(_Sourced):
    """One ds_config.json key (dotted path) and where its value comes from."""

    name: str = Field(pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)*$")
    hf_auto: bool = Field(
        False, description="The HF Trainer fills it in: 'auto' with --hf-trainer."
    )

    @model_validator(mode="after")
    def _has_value(self) -> DeepSpeedEntry:
        if self.key is None and self.value is None:
            raise ValueError("a DeepSpeed key needs `key` or `value`")
        return self


class MegatronArg(_Sourced):
    """One Megatron-LM argument; with neither key nor value it is a switch."""

    flag: str = Field(pattern=r"^--[a-z0-9][a-z0-9-]*$")


class ArgGroup(_Strict):
    title: str
    var: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$", description="Bash array name.")
    args: list[MegatronArg]


class EnvDefault(_Strict):
    """An environment variable the script reads, with its default."""

    name: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    flag: str | None = Field(None, pattern=r"^--[a-z0-9][a-z0-9-]*$")
    default: str = Field(pattern=r"^[A-Za-z0-9_.,:+-]+$")
    doc: str


class Note(_Strict):
    when: str
    text: str


class DeepSpeedMapping(_Strict):
    source: str
    config: list[DeepSpeedEntry]
    notes: list[Note] = []


class MegatronMapping(_Strict):
    source: str
    script: str = Field(
        pattern=SCRIPT_PATH, description="Megatron-LM's training script, relative to its checkout."
    )
    groups: list[ArgGroup]
    run_env: list[EnvDefault]
    data_env: dict[str, EnvDefault]
    notes: list[Note] = []


class LaunchMapping(_Strict):
    """What the torchrun launch scripts read, for every plan, and what they say to the training
    script they start."""

    source: str
    master_port: EnvDefault = Field(description="torchrun's rendezvous port.")
    notes: list[Note] = Field(
        [], description="What the training script must do for the plan (plan.md, launcher)."
    )


class NcclVariable(_Sourced):
    name: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    example: str | None = Field(None, description="A commented example when there is no value.")
    example_when: str | None = None
    rule: str = Field(description="Who sets it (printed in its comment).")
    reason: str


class NcclProposalSetting(_Strict):
    name: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    reason: str


class NcclMapping(_Strict):
    source: str
    variables: list[NcclVariable]
    nvls_architectures: list[str]
    one_connection_exempt_architectures: list[str]
    proposal_settings: dict[str, NcclProposalSetting]


class ChartStyle(_Strict):
    width: PositiveInt
    label_width: PositiveInt
    legend_height: PositiveInt
    legend_item_width: PositiveInt
    bar_height: PositiveInt
    bar_gap: PositiveInt
    margin: PositiveInt
    font_size: PositiveInt


class ReportMapping(_Strict):
    chart_rows: PositiveInt
    chart: ChartStyle
    colors: dict[str, str]


class KindTexts(_Strict):
    """One text for each kind of model, where they differ."""

    transformer: str
    graph: str


class Default(_Strict):
    value: Scalar
    source: str


class MappingFile(_Strict):
    defaults: dict[str, Default]
    deepspeed: dict[str, DeepSpeedMapping]
    megatron: dict[str, MegatronMapping]
    launch: LaunchMapping | None = Field(
        None, description="Absent (a mapping written before it existed): the built-in one."
    )
    nccl: NcclMapping
    proposal_settings: dict[str, str | KindTexts]
    report: ReportMapping


@dataclass(frozen=True)
class LoadedMapping:
    """The validated mapping and its document (for positioned errors), with the launch section
    it uses: its own, else the built-in mapping's (read from `launch_doc`)."""

    data: MappingFile
    doc: Document
    launch: LaunchMapping
    launch_doc: Document

    def check_key(
        self, facts: Mapping[str, Any], key: str | None, path: KeyPath, doc: Document | None = None
    ) -> None:
        if key is not None and key not in facts:
            known = ", ".join(sorted(k for k in facts if k.split(".")[0] == key.split(".")[0]))
            where = (self.doc if doc is None else doc).ref(path)
            raise RenderError(f"unknown canonical key '{key}' (known: {known})", where)

    def data_env(self, version: str) -> dict[str, EnvDefault]:
        """A Megatron version's data_env with `master_port`: the launch section's entry, where
        templates written before that section read it."""
        return {**self.data.megatron[version].data_env, MASTER_PORT: self.launch.master_port}


def load_mapping(path: str | Path, builtin: str | Path | None = None) -> LoadedMapping:
    """Read and validate a mapping file (parsed once while the file stays the same).

    A file without a `launch:` section (written for an earlier version) takes the `builtin`
    mapping's (default: the shipped templates/mapping.yaml), with the `master_port` the file
    names in a Megatron version's `data_env` where it has one.
    """
    data, doc = _read(path)
    old_ports = _data_env_ports(data)
    if data.launch is not None:
        if old_ports:
            version, _ = old_ports[0]
            raise RenderError(
                "master_port is read from launch.master_port; remove it from data_env",
                doc.ref(("megatron", version, "data_env", MASTER_PORT)),
            )
        return LoadedMapping(data, doc, data.launch, doc)
    base, base_doc = _read(builtin or shipped_dir("templates") / MAPPING_FILE)
    if base.launch is None:
        raise RenderError("missing required key 'launch'", base_doc.ref(()))
    launch = base.launch
    if old_ports:
        (first, port), *others = old_ports
        for version, other in others:
            if other != port:
                raise RenderError(
                    f"master_port differs from megatron.{first}.data_env.master_port; "
                    "give it once, as launch.master_port",
                    doc.ref(("megatron", version, "data_env", MASTER_PORT)),
                )
        launch = launch.model_copy(update={"master_port": port})
    return LoadedMapping(data, doc, launch, base_doc)


def _read(path: str | Path) -> tuple[MappingFile, Document]:
    stat = Path(path).stat()
    return _load_mapping(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=8)
def _load_mapping(path: str, mtime_ns: int, size: int) -> tuple[MappingFile, Document]:
    doc = load_document(path)
    return validate(MappingFile, doc.data, doc, error=RenderError), doc


def _data_env_ports(data: MappingFile) -> list[tuple[str, EnvDefault]]:
    """(version, entry) of each Megatron version whose data_env names master_port (the place
    of the rendezvous port before the launch section)."""
    return [
        (version, meg.data_env[MASTER_PORT])
        for version, meg in data.megatron.items()
        if MASTER_PORT in meg.data_env
    ]


def _enabled(
    m: LoadedMapping, facts: Mapping[str, Any], entry: _Sourced, path: KeyPath
) -> Scalar | None:
    """The entry's value when it is written (True for a switch), else None."""
    m.check_key(facts, entry.when, (*path, "when"))
    m.check_key(facts, entry.key, (*path, "key"))
    if entry.when is not None and not facts[entry.when]:
        return None
    if entry.key is not None:
        return facts[entry.key]
    return True if entry.value is None else entry.value


def deepspeed_config(
    m: LoadedMapping, version: str, facts: Mapping[str, Any], *, hf_trainer: bool
) -> dict[str, Any]:
    """ds_config.json as nested data, keys in the mapping's order."""
    config: dict[str, Any] = {}
    for index, entry in enumerate(m.data.deepspeed[version].config):
        value = _enabled(m, facts, entry, ("deepspeed", version, "config", index))
        if value is None:
            continue
        *parents, leaf = entry.name.split(".")
        node = config
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = HF_AUTO if hf_trainer and entry.hf_auto else value
    return config


def megatron_groups(
    m: LoadedMapping, version: str, facts: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The argument groups: title, bash array name and the arguments ([flag] or [flag, value])."""
    groups = []
    for g_index, group in enumerate(m.data.megatron[version].groups):
        args: list[list[str]] = []
        for a_index, arg in enumerate(group.args):
            path = ("megatron", version, "groups", g_index, "args", a_index)
            value = _enabled(m, facts, arg, path)
            if value is None or value is False:
                continue
            switch = arg.key is None and arg.value is None
            args.append([arg.flag] if switch else [arg.flag, _word(value)])
        groups.append({"title": group.title, "var": group.var, "args": args})
    return groups


def _word(value: Scalar) -> str:
    if isinstance(value, bool):
        raise RenderError(f"a boolean ({value}) is not an argument value; make it a switch")
    return str(value)


def nccl_entries(
    m: LoadedMapping,
    facts: Mapping[str, Any],
    proposals: Iterable[ProposalRecord],
    *,
    force_algo: bool,
) -> list[dict[str, Any]]:
    """nccl.env entries: each a comment naming who set it, and a line (active or commented)."""
    nccl = m.data.nccl
    entries = []
    for index, var in enumerate(nccl.variables):
        path = ("nccl", "variables", index)
        value = _enabled(m, facts, var, path)
        m.check_key(facts, var.example_when, (*path, "example_when"))
        comment = f"{var.rule}: {var.reason}"
        if value is not None:
            source = (*path, "key" if var.key is not None else "value")
            line = _assignment(var.name, value, var.rule, m.doc.ref(source))
            entries.append({"comment": comment, "line": line, "active": True})
        elif var.example is not None and var.example_when and facts[var.example_when]:
            example = _assignment(var.name, var.example, var.rule, m.doc.ref((*path, "example")))
            note = f"{var.rule} not given; example to adapt: {var.reason}"
            entries.append({"comment": note, "line": example, "active": False})
    proposals = list(proposals)
    entries.extend(_proposal_entries(nccl, proposals, force_algo=force_algo))
    placed = applied_as(m.data, facts["model.kind"])
    for proposal in proposals:  # the other communication proposals: where they went instead
        other = [k for k in proposal.settings if k not in nccl.proposal_settings]
        if proposal.group == COMMUNICATION and other:
            applied = "; ".join(placed.get(k, NOT_RENDERED) for k in other)
            entries.append({"comment": f"proposal {proposal.rule_id}: {applied}", "line": None})
    return entries


def applied_as(mapping: MappingFile, kind: ModelKind) -> dict[str, str]:
    """Where each proposal setting ends up in a plan for `kind` of model."""
    return {
        setting: getattr(text, kind) if isinstance(text, KindTexts) else text
        for setting, text in mapping.proposal_settings.items()
    }


def _proposal_entries(
    nccl: NcclMapping, proposals: Iterable[ProposalRecord], *, force_algo: bool
) -> list[dict[str, Any]]:
    """One entry per NCCL variable that proposals set; values of several proposals are joined
    into NCCL's list syntax (`Ring,Tree`: NCCL may use either)."""
    found: dict[str, list[tuple[str, str]]] = {}
    for proposal in proposals:
        for setting, value in proposal.settings.items():
            if setting in nccl.proposal_settings:
                found.setdefault(setting, []).append((proposal.rule_id, str(value)))
    entries = []
    for setting, pairs in found.items():
        spec = nccl.proposal_settings[setting]
        values = list(dict.fromkeys(v for _, v in pairs))
        rules = ", ".join(dict.fromkeys(r for r, _ in pairs))
        for rule, value in pairs:  # each alone, so that the error names the rule
            _assignment(spec.name, value, f"proposal {rule}: {setting}")
        comment = f"proposal {rules}" + ("" if force_algo else f": {spec.reason}")
        line = assignment(spec.name, ",".join(values))
        entries.append({"comment": comment, "line": line, "active": force_algo})
    return entries


def _assignment(name: str, value: Scalar, who: str, where: SourceRef | None = None) -> str:
    """`NAME=VALUE` for nccl.env (active or commented out alike), or a RenderError naming
    `who` set it."""
    try:
        return assignment(name, value)
    except RenderError as exc:
        raise RenderError(f"{printable(who)}: {exc.message}", where) from None


def notes(
    m: LoadedMapping,
    items: list[Note],
    facts: Mapping[str, Any],
    path: KeyPath,
    doc: Document | None = None,
) -> list[str]:
    """The texts of the notes whose `when` holds, with `{key}` placeholders filled in (`doc`:
    the file they were read from, when not the mapping's own)."""
    out = []
    for index, note in enumerate(items):
        m.check_key(facts, note.when, (*path, index, "when"), doc)
        if not facts[note.when]:
            continue
        for key in _PLACEHOLDER.findall(note.text):
            m.check_key(facts, key, (*path, index, "text"), doc)
        out.append(_PLACEHOLDER.sub(lambda match: str(facts[match.group(1)]), note.text))
    return out
