"""The schema of the mapping (pydantic, `extra="forbid"`): canonical plan keys -> each backend's
names (each backend's mapping.yaml, parplan_gen/backends/<name>/), the launch scripts'
variables, NCCL's variables and the renderer's defaults (templates/mapping.yaml).

render/mapping.py reads the files against it and applies the mapping to one plan's facts; the
readers of existing configs (each backend's reader.py) invert it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

Scalar = bool | int | float | str
# megatron.script stands in a shell word of megatron_args.sh: a relative path of plain names.
SCRIPT_PATH = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Sourced(_Strict):
    key: str | None = Field(None, description="Canonical key whose value is written.")
    value: Scalar | None = Field(None, description="A constant the renderer adds.")
    when: str | None = Field(None, description="Canonical key: write the entry only when true.")
    source: str | None = Field(None, description="Where a constant comes from.")

    @model_validator(mode="after")
    def _one_value(self) -> Sourced:
        if self.key is not None and self.value is not None:
            raise ValueError("give `key` or `value`, not both")
        if self.value is not None and not (self.source or "").strip():
            raise ValueError("a constant `value` names its `source`")
        return self


class DeepSpeedEntry(Sourced):
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


class AccelerateEntry(Sourced):
    """One accelerate_config.yaml key (a top-level key, or `section.key` for one of its
    sections: fsdp_config, parallelism_config) and where its value comes from."""

    name: str = Field(pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)?$")

    @model_validator(mode="after")
    def _has_value(self) -> AccelerateEntry:
        if self.key is None and self.value is None:
            raise ValueError("an Accelerate key needs `key` or `value`")
        return self


class MegatronArg(Sourced):
    """One Megatron-LM argument; with neither key nor value it is a switch."""

    flag: str = Field(pattern=r"^--[a-z0-9][a-z0-9-]*$")


class ArgGroup(_Strict):
    title: str
    var: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$", description="Bash array name.")
    args: list[MegatronArg]


ENV_DEFAULT = r"^[A-Za-z0-9_.,:+-]+$"  # a default safe in ${NAME:-default}


class EnvDefault(_Strict):
    """An environment variable the script reads, with its default."""

    name: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    flag: str | None = Field(None, pattern=r"^--[a-z0-9][a-z0-9-]*$")
    default: str | None = Field(None, pattern=ENV_DEFAULT)
    key: str | None = Field(
        None,
        description="A fact whose value is the default (the plan's own); with `default`, the "
        "default where the fact has no value.",
    )
    doc: str

    @model_validator(mode="after")
    def _a_default(self) -> EnvDefault:
        if self.default is None and self.key is None:
            raise ValueError(f"{self.name}: give `default`, `key` or both")
        return self


class Note(_Strict):
    when: str
    text: str


class DeepSpeedMapping(_Strict):
    source: str
    config: list[DeepSpeedEntry]
    notes: list[Note] = []


class AccelerateMapping(_Strict):
    source: str
    config: list[AccelerateEntry]
    notes: list[Note] = Field([], description="Shown in accelerate_launch.sh's header and plan.md.")


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


class SourcedCount(_Strict):
    """A count the renderer writes, with where it comes from."""

    value: PositiveInt
    source: str = Field(min_length=1)


class SlurmMapping(_Strict):
    """What launch_slurm.sbatch asks SLURM for beyond the plan, and what it keeps of a time
    limit. CPUs are asked for only as the cluster file's cpus_per_node (or --cpus-per-node)
    says: no figure here stands in for a site's nodes."""

    source: str
    exit_reserve_minutes: SourcedCount = Field(
        description="Minutes kept before the time limit, beyond a step and a checkpoint write."
    )


class NcclVariable(Sourced):
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


class TorchtitanArg(Sourced):
    """One torchtitan (tyro) override; with neither key nor value it is a switch."""

    # Dotted field names; a list's element by its index (tyro: --optimizer.param_groups.0.lr).
    flag: str = Field(pattern=r"^--[a-z][a-z0-9_]*(\.([a-z][a-z0-9_]*|[0-9]+))+$")


# A Python name or a dotted module path the config module writes (a module's fully qualified
# names: torchtitan's FQNs, `layers`, `lm_head`).
FQN = r"^[a-z_][a-z0-9_]*(\.[a-z0-9_]+)*$"


class TorchtitanConfig(_Strict):
    """A config function of the module's config_registry: the rules formula that says a model
    is the one it builds, its model_registry flavor, the precision it trains in and, in fp8,
    the recipe of its converter."""

    model: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    flavor: str | None = Field(None, pattern=r"^[A-Za-z0-9_]+$")
    precision: str
    fp8_recipe: str | None = None


class TorchtitanConfigModule(_Strict):
    """parplan_torchtitan_config.py, written where no config builds the model as the plan is
    priced: the modules each converter leaves 16-bit or converts."""

    source: str
    float8_filter_fqns: list[Annotated[str, Field(pattern=FQN)]]
    mxfp8_fqns: list[Annotated[str, Field(pattern=FQN)]]


class TorchtitanSubcommand(_Strict):
    """A tyro subcommand `<subcommand>:<value of key>` (activation checkpointing)."""

    subcommand: str = Field(pattern=r"^[a-z][a-z-]*$")
    key: str


class TorchtitanMapping(_Strict):
    source: str
    entry: str = Field(pattern=r"^[a-z_]+(\.[a-z_]+)*$", description="python -m entry point.")
    module: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="--module")
    configs: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")], TorchtitanConfig] = Field(
        description="--config name -> what it builds."
    )
    config_module: TorchtitanConfigModule | None = Field(
        None, description="The config function a plan writes where no config builds its model."
    )
    overrides: list[TorchtitanArg]
    activation_checkpoint: TorchtitanSubcommand
    notes: list[Note] = Field([], description="Shown in torchtitan_run.sh's header and plan.md.")


# The largest side of a chart, in pixels: the largest canvas a browser draws (Chromium and
# Firefox cap a side at 32,767 px). It keeps every chart coordinate an exact float.
MAX_CHART_PX = 32_767
Pixels = Annotated[int, Field(ge=1, le=MAX_CHART_PX)]


class ChartStyle(_Strict):
    width: Pixels
    label_width: Pixels
    legend_height: Pixels
    bar_height: Pixels
    bar_gap: Pixels
    margin: Pixels
    font_size: Pixels
    plot_height: Pixels = 240  # the memory chart's column area
    legend_item_width: Pixels | None = None  # a legend entry's least width (else its label's)


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


class BackendSections(_Strict):
    """The backends' sections of the mapping, by release: each backend's folder holds its own
    (parplan_gen/backends/<name>/mapping.yaml); a user's mapping.yaml may hold any, each
    replacing that backend's (render/mapping.py)."""

    deepspeed: dict[str, DeepSpeedMapping] = {}
    megatron: dict[str, MegatronMapping] = {}
    torchtitan: dict[str, TorchtitanMapping] = {}
    accelerate: dict[str, AccelerateMapping] = {}


class MappingFile(BackendSections):
    """templates/mapping.yaml, or a user's: the sections every plan shares (and any backend's
    it replaces). With the backends' own sections merged in, the mapping the renderer applies."""

    defaults: dict[str, Default]
    launch: LaunchMapping
    nccl: NcclMapping
    slurm: SlurmMapping
    proposal_settings: dict[str, str | KindTexts]
    report: ReportMapping
