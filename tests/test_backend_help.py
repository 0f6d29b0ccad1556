"""Every `--backend` help string names every backend (models/kind.py BACKEND_NAMES, the one
list): `estimate --help` once said "megatron, deepspeed, ddp" and left torchtitan out."""

from __future__ import annotations

import contextlib
import io

import pytest

from parplan_gen.cli.main import main
from parplan_gen.models.kind import BACKEND_NAMES


@pytest.mark.parametrize("command", ["estimate", "plan", "check", "compare", "frontier"])
def test_backend_help_names_every_backend(command: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(out.getvalue().split())
    backend = text.split("--backend NAME", 2)[-1]
    for name in BACKEND_NAMES:
        assert name in backend[:400], (command, name)
