"""MODEL as a Hugging Face model id (`org/name`), read from a fake local Hugging Face cache laid
out as huggingface_hub lays it out (models--org--name/refs/main naming the snapshot whose
config.json is a link to a blob), never from the network."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import parplan_gen
from parplan_gen.cli.main import main
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.hf_cache import cached_config, hub_cache, is_hub_id
from parplan_gen.models.hf_config import load_hf_config

COMMIT = "0123456789abcdef0123456789abcdef01234567"
MODEL_ID = "meta-llama/Llama-3.1-8B"
# Llama 3.1 8B's config.json (meta-llama/Llama-3.1-8B on the Hub): the fields parplan reads.
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "torch_dtype": "bfloat16",
}


def fake_cache(root: Path, model_id: str = MODEL_ID, ref: str = COMMIT) -> Path:
    """A hub cache at `root` holding `model_id`'s config.json at commit `ref`; the config's
    path."""
    folder = root / ("models--" + model_id.replace("/", "--"))
    (folder / "blobs").mkdir(parents=True)
    (folder / "blobs" / "5e1b").write_text(json.dumps(CONFIG), encoding="utf-8")
    snapshot = folder / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to(Path("..", "..", "blobs", "5e1b"))
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(ref, encoding="utf-8")
    return snapshot / "config.json"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.chdir(tmp_path)
    return root


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"HF_HUB_CACHE": "/c/hub", "HF_HOME": "/h", "XDG_CACHE_HOME": "/x"}, "/c/hub"),
        ({"HF_HOME": "/h", "XDG_CACHE_HOME": "/x"}, "/h/hub"),
        ({"XDG_CACHE_HOME": "/x"}, "/x/huggingface/hub"),
    ],
)
def test_the_cache_is_where_huggingface_hub_puts_it(environ: dict[str, str], expected: str):
    assert hub_cache(environ) == Path(expected)


def test_without_any_variable_the_cache_is_in_the_home_folder():
    assert hub_cache({}) == Path.home() / ".cache" / "huggingface" / "hub"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("meta-llama/Llama-3.1-8B", True),
        ("Qwen/Qwen2.5-72B-Instruct", True),
        ("llama-3-8b", False),  # a preset name
        ("a/b/c", False),
        ("../config", False),
        ("org/..", False),
        ("org/.hidden", False),
        ("org--x/name", False),  # '--' is the cache's own separator
        ("org/name.git", False),
        ("org/" + "n" * 97, False),
    ],
)
def test_what_reads_as_a_model_id(text: str, expected: bool):
    assert is_hub_id(text) is expected


def test_a_model_id_plans_from_the_cached_config(cache: Path):
    config = fake_cache(cache)
    assert cached_config(MODEL_ID) == config.parent / "config.json"
    found = parplan_gen.plan(MODEL_ID, {"gpus": 8, "gpu": "h100"}, global_batch=64, seq_len=4096)
    direct = load_hf_config(config, name="Llama-3.1-8B")
    assert found.document.model == direct
    assert found.document.model.name == "Llama-3.1-8B"


def test_the_cli_plans_a_model_id(cache: Path, capsys: pytest.CaptureFixture[str]):
    fake_cache(cache)
    argv = ["plan", MODEL_ID, "--gpus", "8", "--gpu", "h100", "--global-batch", "64"]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("Llama-3.1-8B (8.03B params) on 8 x h100-sxm-80gb")


def test_a_model_missing_from_the_cache_says_where_it_looked_and_how_to_get_it(
    cache: Path, capsys: pytest.CaptureFixture[str]
):
    argv = ["plan", MODEL_ID, "--gpus", "8", "--gpu", "h100", "--global-batch", "64"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    ref = cache / "models--meta-llama--Llama-3.1-8B" / "refs" / "main"
    assert err == (
        f"parplan: error: {MODEL_ID}: not a file, a known model name nor a Hugging Face model in "
        f"the local cache (no {ref}; the cache is HF_HUB_CACHE, else HF_HOME/hub, else "
        "~/.cache/huggingface/hub); get its config with `huggingface-cli download "
        f"{MODEL_ID} config.json`\n"
    )


def test_a_snapshot_without_its_config_is_named(cache: Path):
    fake_cache(cache)
    (cache / "models--meta-llama--Llama-3.1-8B" / "snapshots" / COMMIT / "config.json").unlink()
    with pytest.raises(InputError, match=rf"no .*snapshots/{COMMIT}/config.json"):
        cached_config(MODEL_ID)


def test_refs_main_must_hold_a_commit(cache: Path):
    fake_cache(cache, ref="../../../../etc")
    with pytest.raises(
        InputError, match=r"refs/main holds '\.\./\.\./\.\./\.\./etc', not a commit"
    ):
        cached_config(MODEL_ID)


def test_a_path_is_still_a_path(cache: Path, capsys: pytest.CaptureFixture[str]):
    # A missing file with a model file's suffix is a missing file, not a model id; a folder at
    # the id's path is that folder.
    fake_cache(cache)
    argv = ["--gpus", "8", "--gpu", "h100", "--global-batch", "64"]
    assert main(["plan", "configs/llama.json", *argv]) == 1
    assert capsys.readouterr().err == "parplan: error: configs/llama.json: file not found\n"
    Path("meta-llama/Llama-3.1-8B").mkdir(parents=True)
    assert main(["plan", MODEL_ID, *argv]) == 1
    assert "is a folder" in capsys.readouterr().err
