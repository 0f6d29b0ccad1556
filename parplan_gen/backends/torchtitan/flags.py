"""What a torchtitan 0.3 launch line says beside its layout (`parplan check --from-torchtitan`):
the flags whose value the estimate assumes, refused with why when the line says another
(`refuse_unpriced`, from the reader), and the rest, each read with no effect on the estimate (by
group) or ignored (`flags_beside`, check's report line). unpriced_flags.yaml beside this module
holds the lists with their sources.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.safe_text import printable
from parplan_gen.inputs.shell_script import Seg
from parplan_gen.inputs.validation import validated_file
from parplan_gen.render.mapping_inverse import argument_value

FLAGS_FILE = Path(__file__).with_name("unpriced_flags.yaml")
FLAG = r"^--[a-z][a-z0-9_]*(\.([a-z0-9_]+|N))*\.?$"  # a flag, or a section ending in `.`
INDEX = re.compile(r"\.\d+(?=\.|$)")  # a list's index in a flag (`param_groups.0`): `.N`
# What a priced flag acts on (PricedFlag.when): the layout where its value changes anything.
Acts = Literal["pp", "cp", "fsdp"]


@dataclass(frozen=True)
class LayoutRead:
    """The parts of a layout a priced flag's `when` looks at."""

    pp: int
    cp: int
    sharded: bool  # FSDP2 over the data-parallel ranks (ZeRO-3)

    def acts(self, when: Acts | None) -> bool:
        if when == "pp":
            return self.pp > 1
        if when == "cp":
            return self.cp > 1
        return self.sharded if when == "fsdp" else True


class PricedFlag(BaseModel):
    """A flag whose value the estimate assumes: `values` (none: any value is refused), or for a
    switch, off (the flag given is refused; tyro's `--no_` form is the default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flag: str = Field(pattern=FLAG)
    values: tuple[str, ...] = ()
    switch: bool = False
    when: Acts | None = None
    why: str = Field(min_length=1)
    source: str = Field(min_length=1)


class FlagGroup(BaseModel):
    """Flags read with no effect on the estimate: a flag, or a section (`--checkpoint.`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9-]*$")
    what: str = Field(min_length=1)
    source: str = Field(min_length=1)
    flags: tuple[str, ...] = Field(min_length=1)

    def covers(self, flag: str) -> bool:
        return any(flag == f or (f.endswith(".") and flag.startswith(f)) for f in self.flags)


class UnpricedFlags(BaseModel):
    """unpriced_flags.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    release: str = Field(min_length=1)
    priced: tuple[PricedFlag, ...] = Field(min_length=1)
    groups: tuple[FlagGroup, ...] = Field(min_length=1)

    def priced_flags(self) -> set[str]:
        """Every spelling of the priced flags (a switch's tyro negation too)."""
        names = {p.flag for p in self.priced}
        return names | {negation(p.flag) for p in self.priced if p.switch}


@cache
def unpriced_flags() -> UnpricedFlags:
    """unpriced_flags.yaml beside this module, validated."""
    return validated_file(FLAGS_FILE, UnpricedFlags)


def normalised(word: str) -> str:
    """A word's flag as tyro matches it (`-` and `_` alike): `--training.enable_cpu_offload`."""
    return word.partition("=")[0].replace("-", "_").replace("__", "--", 1)


def _entry_name(flag: str) -> str:
    """A normalised flag as unpriced_flags.yaml names it (a list's index as `N`)."""
    return INDEX.sub(".N", flag)


def negation(flag: str) -> str:
    """tyro's `--no_` form of a switch (`--training.no_enable_cpu_offload`)."""
    section, _, name = flag.rpartition(".")
    return f"{section}.no_{name}" if section else f"--no_{flag.removeprefix('--')}"


def refuse_unpriced(words: Sequence[Seg], file: str, layout: LayoutRead) -> None:
    """An InputError naming the flag, its line and why, for a priced flag whose last value on
    the line (as tyro takes it; a switch and its `no_` form are one flag) is not one the
    estimate prices, where it acts on `layout`."""
    priced = {p.flag: p for p in unpriced_flags().priced}
    switches = {negation(p.flag): p for p in priced.values() if p.switch}
    last: dict[str, tuple[PricedFlag, str | bool, SourceRef]] = {}
    for i, (word, line) in enumerate(words):
        flag = normalised(word)
        name = _entry_name(flag)
        entry = priced.get(name) or switches.get(name)
        if entry is None:
            continue
        where = SourceRef(file, line, path=flag)
        value: str | bool = name == entry.flag if entry.switch else argument_value(words, i)
        last[entry.flag] = (entry, value, where)  # a switch and its `no_` form: one flag
    for entry, value, where in last.values():
        if not layout.acts(entry.when) or value is False or value in entry.values:
            continue
        if value is True:
            raise InputError(f"not priced: {entry.why}", where)
        allowed = ", ".join(repr(v) for v in entry.values) or "none"
        raise InputError(
            f"{printable(str(value))!r} is not priced (priced: {allowed}): {entry.why}", where
        )


@dataclass(frozen=True)
class FlagsRead:
    """What a torchtitan line says beside its layout: the flags read with no effect on the
    estimate (group name -> flags, in the line's order; the groups in the file's order) and
    those ignored (the estimate takes torchtitan's default for them)."""

    no_effect: Mapping[str, tuple[str, ...]]
    ignored: tuple[str, ...]


def flags_beside(words: Iterable[Seg], layout_flags: set[str]) -> FlagsRead:
    """Each flag of the torchtitan line, once, as first written, that is none of
    `layout_flags` (what the reader takes into the layout) or the priced ones: in a group of
    unpriced_flags.yaml, or ignored. torchtitan's flags are dotted (`--training.steps`) but for
    its top-level fields, which a group names (`--dump_folder`); a plain flag no group names
    belongs to another command of the script (`srun --nodes`, `nvidia-smi --query-gpu`) and is
    not listed."""
    read = unpriced_flags()
    own = layout_flags | read.priced_flags()
    no_effect: dict[str, list[str]] = {}
    ignored: list[str] = []
    seen: set[str] = set()
    for word, _ in words:
        flag = normalised(word)
        name = _entry_name(flag)
        if len(flag) < 3 or not flag.startswith("--") or flag in seen or name in own:
            continue
        seen.add(flag)
        group = next((g.name for g in read.groups if g.covers(name)), None)
        if group is not None:
            no_effect.setdefault(group, []).append(flag)
        elif "." in flag:
            ignored.append(printable(word.partition("=")[0]))
    groups = {g.name: tuple(no_effect[g.name]) for g in read.groups if g.name in no_effect}
    return FlagsRead(no_effect=groups, ignored=tuple(ignored))
