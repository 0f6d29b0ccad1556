"""What a torchtitan 0.3 job starts from before its overrides: configs.yaml beside this module
(torchtitan's dataclass defaults of the settings a layout reads, the converters a config
function may build the model with, and what each config function sets), validated. The reader
(reader.py) starts a launch line from it; the files' facts (facts.py) read what a config already
turns on.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from parplan_gen.inputs.validation import validated_file

CONFIGS_FILE = Path(__file__).with_name("configs.yaml")
# torchtitan's "the rest" / "the default" value (ParallelismConfig.data_parallel_shard_degree:
# "-1 means leftover ranks will be used"; TrainingConfig.global_batch_size: "Defaults to
# training.local_batch_size * data-parallel degree").
THE_REST = -1


class Settings(BaseModel):
    """What a torchtitan job starts from, as far as a layout reads it (configs.yaml: None where
    a group of it does not set the setting)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    local_batch_size: int | None = Field(None, ge=1)
    global_batch_size: int | None = Field(None, ge=THE_REST)
    seq_len: int | None = Field(None, ge=1)
    data_parallel_replicate_degree: int | None = Field(None, ge=1)
    data_parallel_shard_degree: int | None = Field(None, ge=THE_REST)
    tensor_parallel_degree: int | None = Field(None, ge=1)
    enable_sequence_parallel: bool | None = None
    pipeline_parallel_degree: int | None = Field(None, ge=1)
    pipeline_parallel_microbatch_size: int | None = Field(None, ge=1)
    context_parallel_degree: int | None = Field(None, ge=1)
    expert_parallel_degree: int | None = Field(None, ge=1)
    activation_checkpoint: Literal["none", "selective", "full"] | None = None
    compile: bool | None = None  # CompileConfig.enable
    # CompileConfig.components: the loss is compiled with `loss` among them (Layout.loss_compiled)
    compile_components: tuple[Literal["model", "loss"], ...] | None = None
    async_tp: bool | None = None  # recorded; the rules decide the TP overlap a check prices
    float8: bool | None = None  # Float8Linear converters: the layout's precision fp8


class SettingsGroup(BaseModel):
    """Settings and the file and class or function of torchtitan they come from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1)
    settings: Settings


class ConfigSettings(SettingsGroup):
    """A config function's settings and the model_registry flavor it builds."""

    flavor: str = Field(min_length=1)


class Converter(BaseModel):
    """A model converter a config function may build the model with (an FP8 plan's), and the
    recipe_name values it takes (none: it has no such field)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(min_length=1)
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    recipes: tuple[str, ...]


class ConfigRegistry(BaseModel):
    """configs.yaml: torchtitan's defaults, the converters, then each config function's own
    settings."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    release: str = Field(min_length=1)
    repository: str = Field(min_length=1)
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    defaults: tuple[SettingsGroup, ...] = Field(min_length=1)
    converters: tuple[Converter, ...] = Field(min_length=1)
    configs: dict[str, ConfigSettings] = Field(min_length=1)

    @model_validator(mode="after")
    def _every_default(self) -> ConfigRegistry:
        missing = [name for name in Settings.model_fields if self.default(name) is None]
        if missing:
            raise ValueError(f"defaults: no value for {', '.join(missing)}")
        return self

    def default(self, name: str) -> Any:
        """The default of one setting (the first group that sets it), None if none does."""
        values = (getattr(group.settings, name) for group in self.defaults)
        return next((value for value in values if value is not None), None)

    def settings(self, config: str) -> dict[str, Any]:
        """Every setting a job started from `config` has before its overrides."""
        own = self.configs[config].settings.model_dump(exclude_none=True)
        return {name: self.default(name) for name in Settings.model_fields} | own


@cache
def config_registry() -> ConfigRegistry:
    """configs.yaml beside this module, validated."""
    return validated_file(CONFIGS_FILE, ConfigRegistry)
