"""A Hugging Face model id (`org/name`) read from the local Hugging Face cache, never from the
network: the `config.json` of the snapshot that `refs/main` names.

Where the cache is, as huggingface_hub resolves it (its documentation, "Environment
variables"): `HF_HUB_CACHE`; else `$HF_HOME/hub`; else `$XDG_CACHE_HOME/huggingface/hub`; else
`~/.cache/huggingface/hub`. A model's files are under `models--<org>--<name>/`: `refs/main`
holds the commit of the `main` branch and `snapshots/<commit>/config.json` is its config
(huggingface_hub's cache layout, "Understand caching").
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.reading import read_bytes
from parplan_gen.inputs.safe_text import printable

# huggingface_hub's validate_repo_id: word characters, '-' and '.', 1 to 96 of them per part,
# neither '--' nor '..' inside, not ending in '.git'; here always two parts (org/name).
_PART = r"[\w.-]{1,96}"
HUB_ID = re.compile(rf"^(?P<org>{_PART})/(?P<name>{_PART})$", re.ASCII)
# A commit as refs/main holds it: a git object id (40 hex digits; 64 for SHA-256 repositories).
COMMIT = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
REF_BYTES = 128  # refs/main is one commit id and a newline at most
CONFIG = "config.json"


def is_hub_id(text: str) -> bool:
    """Whether `text` has the form of a Hugging Face model id (`meta-llama/Llama-3.1-8B`)."""
    found = HUB_ID.match(text)
    if found is None or ".." in text or "--" in text or text.endswith(".git"):
        return False
    return not any(part in (".", "-") or part.startswith(".") for part in found.groups())


def hub_cache(environ: Mapping[str, str] | None = None) -> Path:
    """The Hugging Face hub cache folder for `environ` (default: this process's)."""
    env = os.environ if environ is None else environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def cached_config(model_id: str, environ: Mapping[str, str] | None = None) -> Path:
    """The cached `config.json` of `model_id` (an `is_hub_id` text) at the commit `refs/main`
    names. An InputError saying where it looked and how to get the file when it is not there."""
    cache = hub_cache(environ)
    folder = cache / ("models--" + model_id.replace("/", "--"))
    ref = folder / "refs" / "main"
    if not ref.is_file():
        raise _missing(model_id, f"no {ref}")
    commit = read_bytes(ref, max_bytes=REF_BYTES).decode("ascii", "replace").strip()
    if not COMMIT.match(commit):
        shown = printable(repr(commit))
        raise InputError(f"{ref}: refs/main holds {shown}, not a commit id", SourceRef(str(ref)))
    config = folder / "snapshots" / commit / CONFIG
    if not config.is_file():
        raise _missing(model_id, f"no {config}")
    return config


def _missing(model_id: str, looked: str) -> InputError:
    return InputError(
        f"not a file, a known model name nor a Hugging Face model in the local cache ({looked}; "
        "the cache is HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub); get its "
        f"config with `huggingface-cli download {model_id} config.json`",
        SourceRef(model_id),
    )
