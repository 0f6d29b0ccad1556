"""Read a config.json's training settings (`TrainingSettings`) with the keys and defaults of
parplan_gen/data/hf_training.yaml: per model_type, which keys hold the norm epsilon, the dropout
rates and the MoE router settings, and the config class's default when a key is absent. RoPE is
read the same way for every family: `rope_theta` (transformers 4) or `rope_parameters`
(transformers 5), and `rope_scaling` / `rope_parameters` with a `rope_type` other than default.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from parplan_gen.inputs.errors import shown_value
from parplan_gen.inputs.source import read_package_data
from parplan_gen.inputs.validation import validate
from parplan_gen.models.hf_reader import ConfigReader
from parplan_gen.models.training_settings import RopeScaling, TrainingSettings

DATA_FILE = "hf_training.yaml"
Scalar = float | int | bool | str | None


class Setting(BaseModel):
    """One setting of a family: the first of `keys` present, else `default`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: tuple[str, ...] = ()
    default: Scalar = None
    true_when: str | None = Field(default=None, description="A string key that means True.")
    only_if: tuple[str, str] | None = Field(
        default=None,
        description="(config key, value): the setting is null unless the config's key has "
        "this value (absent, the key is its class default, which is not the value).",
    )
    unless: str | None = Field(
        default=None, description="Another setting of the family: where it is true, null."
    )


class TrainingKeys(BaseModel):
    """parplan_gen/data/hf_training.yaml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    rope_theta_default: float = Field(gt=0)
    families: dict[str, dict[str, Setting]]

    @model_validator(mode="after")
    def _unless_names_a_setting(self) -> TrainingKeys:
        for family, settings in self.families.items():
            for name, setting in settings.items():
                if setting.unless is not None and setting.unless not in settings:
                    raise ValueError(f"{family}.{name}: unless names no setting ({setting.unless})")
        return self


@cache
def training_keys() -> TrainingKeys:
    doc = read_package_data(DATA_FILE)
    return validate(TrainingKeys, doc.data, doc)


def training_settings(r: ConfigReader, *, rope: bool, moe: bool) -> TrainingSettings:
    """The training settings of the config `r` reads (`rope`: the model uses RoPE; `moe`: it
    routes tokens to experts, else the router settings stay unset)."""
    table = training_keys()
    family = table.families.get(r.model_type, {})
    # rope_theta is read below, with rope_parameters and the table's default
    keys_read = {name: _key(r, s) for name, s in family.items()}  # the config key of each
    values: dict[str, Scalar | RopeScaling] = {
        name: _value(r, s) for name, s in family.items() if name != "rope_theta"
    }
    for name, s in family.items():  # after every value: `unless` names another setting
        if s.unless is not None and values.get(s.unless) is True:
            values[name] = None
    if not rope:
        values.pop("rope_fraction", None)
    if not moe:
        values = {k: v for k, v in values.items() if k in _DENSE}
    if rope:
        own = family.get("rope_theta", Setting())
        keys = tuple(dict.fromkeys(("rope_theta", *own.keys)))
        default = own.default if isinstance(own.default, float) else table.rope_theta_default
        values["rope_theta"] = _rope_theta(r, keys, default)
        values["rope_scaling"] = _rope_scaling(r)
    try:
        return TrainingSettings.model_validate(values)
    except ValidationError as exc:
        detail = exc.errors(include_url=False)[0]
        name = str(detail["loc"][0])
        key = keys_read.get(name)
        if key is None:  # the family's default: no key of the config holds it
            raise r.fail(None, f"training setting {name}: {detail['msg']}") from None
        got = shown_value(detail.get("input"))
        raise r.fail(key, f"training setting {name}: {detail['msg']} (got {got})") from None


_DENSE = frozenset({"norm_eps", "attention_dropout", "hidden_dropout", "rope_fraction"})


def _key(r: ConfigReader, setting: Setting) -> str | None:
    """The config key `setting` is read from, or None when the family's default applies."""
    found = r.first(setting.keys)
    return None if found is None else found[0]


def _value(r: ConfigReader, setting: Setting) -> Scalar:
    if setting.only_if is not None and r.data.get(setting.only_if[0]) != setting.only_if[1]:
        return None
    found = r.first(setting.keys)
    if found is None:
        return setting.default
    key, value = found
    if setting.true_when is not None:
        return value == setting.true_when
    if isinstance(setting.default, bool) and not isinstance(value, bool):
        raise r.fail(key, f"'{key}' must be true or false, not {shown_value(value)}")
    return value


def _rope_theta(r: ConfigReader, keys: tuple[str, ...], default: float) -> float:
    """The first of `keys` present, else `rope_parameters.rope_theta`, else `default`."""
    found = [(key, r.data.get(key)) for key in keys]
    for where, value in (*found, ("rope_parameters", r.data.get("rope_parameters"))):
        if isinstance(value, dict):
            value = value.get("rope_theta")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise r.fail(where, f"rope_theta must be a positive number, not {shown_value(value)}")
        return float(value)
    return default


def _rope_scaling(r: ConfigReader) -> RopeScaling | None:
    for key in ("rope_scaling", "rope_parameters"):
        raw: Any = r.data.get(key)
        if raw is None:
            continue
        if not isinstance(raw, dict):
            raise r.fail(key, f"'{key}' must be a mapping, not {shown_value(raw)}")
        kind = raw.get("rope_type", raw.get("type", "default"))
        if kind == "default":
            return None
        fields = {k: raw.get(k) for k in RopeScaling.model_fields if k != "kind"}
        try:
            return RopeScaling.model_validate({"kind": kind} | fields)
        except ValidationError as exc:
            detail = exc.errors(include_url=False)[0]
            raise r.fail(key, f"{detail['loc'][0]}: {detail['msg']}") from None
    return None
