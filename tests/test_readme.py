"""The README's Python examples run as written, its quick-start command is a real plan, and its
graph-model plan excerpt is real output."""

from __future__ import annotations

import json
import re
import shlex

from parplan_gen.render.plan_files import BACKEND_FILES

from conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert len(blocks) >= 2, "the README has Python examples (a transformer and a graph model)"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


def test_the_graph_model_plan_excerpt_is_real(cli):
    """The `parplan plan resnet-50` console excerpt is the real output, where a `...` line
    stands for any lines."""
    block = re.search(r"```console\n\$ (parplan plan resnet-50[^\n]*)\n(.*?)```", README, re.S)
    assert block, "the README shows a graph-model plan"
    result = cli(*shlex.split(block.group(1))[1:])
    assert result.code == 0, result.err
    # The README keeps no trailing spaces (an empty memory bar leaves some in the output).
    actual = [line.rstrip() for line in result.out.splitlines()]
    at, skip = 0, False
    for line in block.group(2).splitlines():
        if line == "...":
            skip = True
            continue
        rest = actual[at:] if skip else actual[at : at + 1]
        assert line in rest, f"expected next: {line!r}\n{result.out}"
        at, skip = at + rest.index(line) + 1, False


def test_the_quick_start_plans_and_writes_the_files(cli, tmp_path, monkeypatch):
    command = re.search(r"&& (parplan plan [^\n]*)\n", README)
    assert command, "the quick start ends with a parplan plan command"
    argv = shlex.split(command.group(1))[1:]
    monkeypatch.chdir(tmp_path)
    result = cli(*argv)
    assert result.code == 0, result.err
    written = {p.name for p in (tmp_path / "plan").iterdir()}
    assert {"plan.json", "nccl.env", "plan.md"} <= written
    chosen = json.loads((tmp_path / "plan" / "plan.json").read_text())["chosen"]["backend"]
    own = BACKEND_FILES.get(chosen["name"], "launch_torchrun.sh")  # DDP: the launcher
    assert own in written  # the chosen backend's file is the plan
