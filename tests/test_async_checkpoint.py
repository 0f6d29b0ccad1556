"""Asynchronous checkpoints in the training budget (issue 14, item 2): where the chosen backend
writes a checkpoint in the background (Megatron-LM --async-save with torch_dist, torchtitan
checkpoint.async_mode async), training waits only for the copy of each GPU's share to host
memory; Young's interval is taken on that wait; a failure also loses the window in which the
newest checkpoint was not yet on storage; the rendered file carries the flag only then.

Figures worked by hand: a checkpoint holds 2 + 12 bytes per parameter (ZeRO Sec. 3.1); an H100
reaches host memory over PCIe Gen5 x16, 128 GB/s both directions ([H100-DS]), so 64e9 bytes/s
one way; Young 1974: interval = sqrt(2 x wait x MTBF)."""

from __future__ import annotations

import math

import pytest

import parplan_gen
from parplan_gen.cli.main import main
from parplan_gen.inputs.errors import SourceRef
from parplan_gen.planning.budget import Budget
from parplan_gen.render.plan_files import render_plan

from conftest import builtin_rules
from consumer_support import consumer

H100_HOST = 128e9 / 2  # [H100-DS] PCIe Gen5 x16: 128 GB/s bidirectional, one direction


def formula(name: str, env: dict) -> float:
    library = builtin_rules().library
    return library.compile(name, SourceRef("test"), "budget").evaluate(env)  # type: ignore[return-value]


def env_of(backend: str, zero: int, *, storage: float, host: float = H100_HOST) -> dict:
    # 1e9 params: 14e9 bytes; 36 GPUs at 50 GPU-hours each fail every 50 x 3600 / 36 = 5,000 s
    return {
        "model.params": 1e9, "cluster.gpus": 36, "budget.mtbf_gpu_hours": 50,
        "budget.storage_bytes_per_s": storage, "budget.host_bytes_per_s": host,
        "train.backend": backend, "plan.zero_stage": zero,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("backend", "zero", "host", "expected"),
    [
        ("megatron", 0, H100_HOST, True),  # --async-save with torch_dist
        ("megatron", 2, H100_HOST, False),  # Megatron-FSDP: fsdp_dtensor, no async save
        ("megatron", 3, H100_HOST, False),
        ("torchtitan", 3, H100_HOST, True),  # dcp.async_save
        ("deepspeed", 1, H100_HOST, False),  # decoupled writer: committed before the next step
        ("ddp", 0, H100_HOST, False),
        ("megatron", 0, 0.0, False),  # no host link figure: no copy is priced
    ],
)
def test_which_backends_write_in_the_background(backend, zero, host, expected):
    env = env_of(backend, zero, storage=1.4e10, host=host)
    assert formula("budget_checkpoint_async", env) is expected
    # blocking: training waits for the whole write, 14e9 / 1.4e10 = 1 s
    if not expected:
        assert formula("budget_checkpoint_blocking_s", env) == pytest.approx(1.0)
        assert formula("budget_checkpoint_lag_s", env) == 0


def test_the_wait_is_the_copy_and_young_is_taken_on_it():
    env = env_of("megatron", 0, storage=1.4e10)  # the write: 14e9 / 1.4e10 = 1 s
    copy = 14e9 / 36 / 64e9  # each GPU's share over its host link: 6.08 ms
    assert formula("budget_checkpoint_copy_s", env) == pytest.approx(copy)
    assert formula("budget_checkpoint_blocking_s", env) == pytest.approx(copy)
    interval = math.sqrt(2 * copy * 5000)  # 7.80 s, above copy + write (1.006 s)
    assert formula("budget_checkpoint_interval_s", env) == pytest.approx(interval)
    assert interval == pytest.approx(7.795, abs=1e-3)
    # lost per failure: half an interval, the 1 s write not yet on storage, the 1 s read back
    progress = 1 - (interval / 2 + 1 + 1) / 5000
    assert formula("budget_progress", env) == pytest.approx(progress)
    assert formula("budget_checkpoint_factor", env) == pytest.approx(1 + copy / interval)


def test_an_async_interval_never_starts_before_the_last_checkpoint_is_written():
    env = env_of("torchtitan", 3, storage=1.4e8)  # the write: 100 s; Young on the copy: 7.8 s
    assert formula("budget_checkpoint_interval_s", env) == pytest.approx(100 + 14e9 / 36 / 64e9)


def test_a_blocking_budget_is_as_before():
    env = env_of("deepspeed", 1, storage=1.4e8)  # the write: 100 s
    assert formula("budget_checkpoint_interval_s", env) == pytest.approx(1000)  # sqrt(2e2 x 5e3)
    assert formula("budget_progress", env) == pytest.approx(0.88)  # 1 - (500 + 100) / 5000


# ---- through the API, the views and the rendered files ---------------------------------------


def _plan(model: str, gpus: int, gpu: str = "h100", **request):
    return parplan_gen.plan(model, {"gpus": gpus, "gpu": gpu}, global_batch=1024, seq_len=8192,
                            tokens="1T", **request)  # fmt: skip


def test_a_torchtitan_plan_checkpoints_asynchronously_and_says_so():
    result = _plan("llama-3-70b", 256, backend="torchtitan")
    b = result.document.budget
    assert b.checkpoint_async and b.host_bytes_per_s == H100_HOST
    assert b.checkpoint_blocking_s == pytest.approx(b.checkpoint_bytes / 256 / H100_HOST)
    assert b.checkpoint_mode.startswith("asynchronous (torchtitan --checkpoint.async_mode async)")
    files = render_plan(result.document)
    assert "    --checkpoint.async_mode async\n" in files["torchtitan_run.sh"]
    assert "| checkpointing | asynchronous (torchtitan" in files["plan.md"]


def test_torchtitan_parses_the_async_mode_it_is_given(tmp_path):
    import consumer_torchtitan

    consumer("torchtitan.config.manager")  # skipped where torchtitan is not installed
    result = _plan("llama-3-70b", 256, backend="torchtitan")
    result.write(tmp_path / "plan")
    reading = consumer_torchtitan.torchtitan_reading(tmp_path / "plan" / "torchtitan_run.sh", 256)
    assert reading.parsed.checkpoint.async_mode == "async"


def test_a_megatron_plan_renders_async_save_with_torch_dist(tmp_path):
    import consumer_megatron

    result = _plan("llama-3-8b", 64, backend="megatron", pins={"zero_stage": 0})
    assert result.document.budget.checkpoint_async
    text = render_plan(result.document)["megatron_args.sh"]
    for flag in ("--async-save", "--use-persistent-ckpt-worker", "--ckpt-format torch_dist"):
        assert f"    {flag}\n" in text, flag
    result.write(tmp_path / "plan")
    consumer("megatron.core")  # skipped where Megatron-Core is not installed
    reading = consumer_megatron.megatron_reading(tmp_path / "plan" / "megatron_args.sh")
    assert reading.unread == ()  # Megatron-LM's own arguments (consumer_megatron TRAINING_ONLY)


@pytest.mark.parametrize(
    ("model", "gpus", "gpu", "request_", "why"),
    [
        ("llama-3-8b", 64, "h100", {"backend": "deepspeed"}, "deepspeed has no asynchronous"),
        ("llama-3-8b", 64, "h100", {"backend": "megatron", "pins": {"zero_stage": 2}},
         "Megatron-FSDP saves --ckpt-format fsdp_dtensor"),
        ("llama-3-8b", 64, "b200", {"backend": "torchtitan"}, "no host link figure for b200"),
    ],
)  # fmt: skip
def test_a_blocking_plan_says_why_and_renders_no_async_flag(model, gpus, gpu, request_, why):
    result = _plan(model, gpus, gpu, **request_)
    b = result.document.budget
    assert not b.checkpoint_async and why in b.checkpoint_mode
    assert b.checkpoint_blocking_s == pytest.approx(b.checkpoint_write_s)
    for name, text in render_plan(result.document).items():
        if name not in ("plan.md", "plan.json"):  # which say why, naming the flag
            assert "--async-save" not in text and "async_mode" not in text, name


def test_without_tokens_no_checkpoint_flag_is_rendered():
    result = parplan_gen.plan("llama-3-70b", {"gpus": 256, "gpu": "h100"}, global_batch=1024,
                              seq_len=8192, backend="torchtitan")  # fmt: skip
    assert result.document.budget is None
    assert "async_mode" not in render_plan(result.document)["torchtitan_run.sh"]


def test_the_text_view_shows_the_wait_and_the_mode(capsys):
    argv = ["plan", "llama-3-70b", "--gpus", "256", "--gpu", "h100", "--global-batch", "1024",
            "--tokens", "1T", "--backend", "torchtitan"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "  checkpointing:" in out and "asynchronous (torchtitan" in out
    assert "the copy to host at 64 GB/s per GPU, [H100-DS] PCIe Gen5 x16, 128 GB/s" in out
    assert "(the job's relaunch is not counted: no published figure sourced)" in out


def test_a_plan_json_budget_of_before_still_loads():
    old = {
        "tokens": 1e12, "tokens_per_step": 8e6, "steps": 125000, "step_s": 10.0,
        "compute_days": 14.5, "checkpoint_bytes": 1e12, "storage_bytes_per_s": 1e10,
        "storage_source": "x", "checkpoint_write_s": 100.0, "checkpoint_interval_s": 3000.0,
        "checkpoints": 400.0, "mtbf_gpu_hours": 5e4, "mtbf_source": "x", "job_mtbf_hours": 50.0,
        "interruptions": 7.0, "checkpoint_days": 0.5, "lost_days": 0.5, "wall_days": 15.5,
        "compute_gpu_hours": 1e5, "gpu_hours": 1.1e5, "gpu_hour_price": None,
        "price_source": None, "cost": None,
    }  # fmt: skip
    b = Budget.model_validate(old)
    assert not b.checkpoint_async and b.checkpoint_mode is None and b.restart_s is None
