"""The mapping read and applied: canonical plan keys -> each backend's names.

The mapping is one document read from several files: templates/mapping.yaml (the sections every
plan shares: defaults, launch, nccl, proposal_settings, report, slurm) and each backend's own
section, `parplan_gen/backends/<name>/mapping.yaml`. A user's mapping.yaml (`--templates DIR`)
takes the place of templates/mapping.yaml, and each backend section it holds replaces that
backend's whole section (every release of it); the backends it does not name keep their own.
Every error names the file and line its entry came from.

This module reads the files against their schema (render/mapping_schema.py, with file:line
errors) and applies the mapping to the canonical facts of one plan (render/facts.py): the
DeepSpeed config as nested JSON data, the Megatron-LM argument groups, the nccl.env entries and
the notes (the launchers' notes are what an op-graph model's training script must do). Values
are computed here or in render/facts.py; the templates only format them.

A mapping file is read in this release's format only (0.x formats may change between minor
versions, CHANGELOG.md): one without the `launch:` section is refused, and so is one that
names `master_port` in a Megatron version's `data_env` (it is `launch.master_port`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar, cast

from parplan_gen.inputs.errors import SourceRef
from parplan_gen.inputs.key_path import KeyPath
from parplan_gen.inputs.number_text import unusable_numbers
from parplan_gen.inputs.resources import backend_files
from parplan_gen.inputs.safe_text import printable
from parplan_gen.inputs.source import Document, load_document
from parplan_gen.inputs.validation import validate
from parplan_gen.models.kind import ModelKind
from parplan_gen.render.checks import RenderError
from parplan_gen.render.mapping_schema import (
    BackendSections,
    KindTexts,
    MappingFile,
    NcclMapping,
    Note,
    Scalar,
    Sourced,
)
from parplan_gen.render.shell_quote import assignment
from parplan_gen.rules.engine import Proposal

MAPPING_FILE = "mapping.yaml"
MASTER_PORT = "master_port"  # launch.master_port, never in a Megatron version's data_env
COMMUNICATION = "communication"  # the proposal group whose settings concern NCCL
NOT_RENDERED = "not rendered"  # a proposal setting the mapping does not place
HF_AUTO = (
    "auto"  # what the Hugging Face Trainer fills in itself (transformers.integrations.deepspeed)
)
_PLACEHOLDER = re.compile(r"\{([a-z_]+\.[a-z0-9_.]+)\}")
S = TypeVar("S", bound=BackendSections)


@dataclass(frozen=True)
class LoadedMapping:
    """The validated mapping and the documents it was read from (for positioned errors)."""

    data: MappingFile
    doc: Document  # templates/mapping.yaml, or the user's
    sections: Mapping[str, Document] = field(default_factory=dict)  # a backend's own file

    def doc_of(self, path: KeyPath) -> Document:
        """The document the entry at `path` was read from."""
        return self.sections.get(str(path[0]), self.doc) if path else self.doc

    def check_key(
        self, facts: Mapping[str, Any], key: str | None, path: KeyPath, doc: Document | None = None
    ) -> None:
        if key is not None and key not in facts:
            known = ", ".join(sorted(k for k in facts if k.split(".")[0] == key.split(".")[0]))
            where = (self.doc_of(path) if doc is None else doc).ref(path)
            raise RenderError(f"unknown canonical key '{key}' (known: {known})", where)


def load_mapping(path: str | Path, backends: Sequence[Path] | None = None) -> LoadedMapping:
    """Read and validate the mapping: the file `path` (templates/mapping.yaml or a user's) and,
    for each backend section it does not hold, that backend's mapping.yaml (`backends`: those
    files; None: the built-in ones). Each file is parsed once while it stays the same."""
    data, doc = _load_file(path, MappingFile)
    own: dict[str, Any] = {}
    sections: dict[str, Document] = {}
    for file in backend_files(MAPPING_FILE) if backends is None else backends:
        section, section_doc = _load_file(file, BackendSections)
        name = file.parent.name
        if set(section_doc.data or {}) != {name}:
            raise RenderError(
                f"a backend's {MAPPING_FILE} holds its own section only ({name}:)",
                section_doc.ref(),
            )
        if name not in (doc.data or {}):  # else the user's file replaces it
            own[name], sections[name] = getattr(section, name), section_doc
    loaded = LoadedMapping(data.model_copy(update=own), doc, sections)
    for version, meg in loaded.data.megatron.items():
        if MASTER_PORT in meg.data_env:
            raise RenderError(
                "master_port is read from launch.master_port; remove it from data_env",
                loaded.doc_of(("megatron",)).ref(("megatron", version, "data_env", MASTER_PORT)),
            )
    return loaded


def _load_file(path: str | Path, schema: type[S]) -> tuple[S, Document]:
    stat = Path(path).stat()
    data, doc = _parsed(str(path), stat.st_mtime_ns, stat.st_size, schema)
    return cast(S, data), doc


@lru_cache(maxsize=16)
def _parsed(
    path: str, mtime_ns: int, size: int, schema: type[BackendSections]
) -> tuple[BackendSections, Document]:
    doc = load_document(path)
    # A constant the mapping sends to a backend is written into its files: one no float holds
    # (`1e400` reads as inf, a 400-digit integer) is refused here, at its key.
    bad = next(unusable_numbers(doc.data), None)
    if bad is not None:
        raise RenderError(bad[1], doc.ref(bad[0]))
    return validate(schema, doc.data, doc, error=RenderError), doc


def _enabled(
    m: LoadedMapping, facts: Mapping[str, Any], entry: Sourced, path: KeyPath
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
        if value is not None:
            _place(config, entry.name, HF_AUTO if hf_trainer and entry.hf_auto else value)
    return config


def accelerate_config(m: LoadedMapping, version: str, facts: Mapping[str, Any]) -> dict[str, Any]:
    """accelerate_config.yaml as nested data (a key, or a section of keys), in the mapping's
    order."""
    config: dict[str, Any] = {}
    for index, entry in enumerate(m.data.accelerate[version].config):
        value = _enabled(m, facts, entry, ("accelerate", version, "config", index))
        if value is not None:
            _place(config, entry.name, value)
    return config


def _place(config: dict[str, Any], name: str, value: Scalar) -> None:
    """Set the dotted key `name` of `config` to `value`, making its sections on the way."""
    *parents, leaf = name.split(".")
    node = config
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


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


def torchtitan_args(m: LoadedMapping, version: str, facts: Mapping[str, Any]) -> list[list[str]]:
    """torchtitan's overrides ([flag], [flag, value], or [flag, *values] for a list, which tyro
    reads as one word each), then its activation-checkpointing subcommand
    ([`activation-checkpoint:<mode>`])."""
    section = m.data.torchtitan[version]
    args: list[list[str]] = []
    for index, arg in enumerate(section.overrides):
        value = _enabled(m, facts, arg, ("torchtitan", version, "overrides", index))
        if value is None or value is False:
            continue
        switch = arg.key is None and arg.value is None
        values = value if isinstance(value, list | tuple) else [value]
        args.append([arg.flag] if switch else [arg.flag, *map(_word, values)])
    sub = section.activation_checkpoint
    m.check_key(facts, sub.key, ("torchtitan", version, "activation_checkpoint", "key"))
    return [*args, [f"{sub.subcommand}:{_word(facts[sub.key])}"]]


def _word(value: Scalar) -> str:
    if isinstance(value, bool):
        raise RenderError(f"a boolean ({value}) is not an argument value; make it a switch")
    return str(value)


def nccl_entries(
    m: LoadedMapping,
    facts: Mapping[str, Any],
    proposals: Iterable[Proposal],
    *,
    force_algo: bool,
) -> list[dict[str, Any]]:
    """nccl.env entries: each a comment naming who set it, and a line (active or commented)."""
    nccl = m.data.nccl
    entries = []
    for index, var in enumerate(nccl.variables):
        path = ("nccl", "variables", index)
        # an entry with neither key nor value is only ever a commented example
        given = var.key is not None or var.value is not None
        value = _enabled(m, facts, var, path) if given else None
        m.check_key(facts, var.example_when, (*path, "example_when"))
        comment = f"{var.rule}: {var.reason}"
        if value is not None:
            source = (*path, "key" if var.key is not None else "value")
            line = _assignment(var.name, value, var.rule, m.doc.ref(source))
            entries.append({"comment": comment, "line": line, "active": True})
        elif var.example is not None and var.example_when and facts[var.example_when]:
            example = _assignment(var.name, var.example, var.rule, m.doc.ref((*path, "example")))
            note = (
                f"{var.rule} not given; example to adapt: {var.reason}"
                if given
                else f"{var.rule}, a suggestion to enable: {var.reason}"
            )
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
    nccl: NcclMapping, proposals: Iterable[Proposal], *, force_algo: bool
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
