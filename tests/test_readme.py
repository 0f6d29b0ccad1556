"""The README's Python example runs as written, and its quick-start command is a real plan."""

from __future__ import annotations

import re
import shlex

from conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_python_example_runs():
    block = re.search(r"```python\n(.*?)```", README, re.S)
    assert block, "the README has a Python example"
    exec(compile(block.group(1), "README.md", "exec"), {})


def test_the_quick_start_plans_and_writes_the_files(cli, tmp_path, monkeypatch):
    command = re.search(r"&& (parplan plan [^\n]*)\n", README)
    assert command, "the quick start ends with a parplan plan command"
    argv = shlex.split(command.group(1))[1:]
    monkeypatch.chdir(tmp_path)
    result = cli(*argv)
    assert result.code == 0, result.err
    written = {p.name for p in (tmp_path / "plan").iterdir()}
    assert {"plan.json", "ds_config.json", "megatron_args.sh", "nccl.env"} <= written
