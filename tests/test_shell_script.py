"""Megatron-LM launch scripts as people write them (inputs/shell_script.py): arguments kept in
quoted variables and arrays, `${VAR:-default}` sizes, line continuations, read as bash would
expand them, without running anything or reading the environment. The scripts are shaped like
Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh and examples/llama/*.sh."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from parplan_gen.backends.megatron.reader import megatron_values
from parplan_gen.inputs.errors import InputError
from parplan_gen.inputs.shell_parse import MAX_NESTING
from parplan_gen.inputs.shell_script import MAX_EXPANDED_CHARS, script_words
from parplan_gen.render.mapping_inverse import UNFILLED

from hostile_support import hang_guard

LAYERS = 32


def read(tmp_path: Path, text: str, layers: int = LAYERS) -> dict[str, Any]:
    """The layout fields of `text`, less the gradient reduction's overlap, which none of these
    scripts turns on (read as off: tests/test_overlap_grad_reduce.py)."""
    path = tmp_path / "train.sh"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    values = megatron_values(path, layers)
    assert values.pop("overlap_grad_reduce") is False
    return values


def words(text: str) -> list[str]:
    return [w for w, _ in script_words(textwrap.dedent(text))]


def test_arguments_in_quoted_variables(tmp_path: Path) -> None:
    values = read(
        tmp_path,
        """
        #!/bin/bash
        GPT_ARGS="--num-layers 32 --hidden-size 4096 --seq-length 4096 \\
            --micro-batch-size 2 --global-batch-size 512 --bf16"
        DATA_ARGS="--data-path $DATA --split 949,50,1"
        torchrun --nproc_per_node 8 pretrain_gpt.py $GPT_ARGS $DATA_ARGS \\
            --tensor-model-parallel-size 2
        """,
    )
    assert values == {
        "seq_len": 4096, "mbs": 2, "global_batch": 512, "precision": "bf16", "tp": 2,
    }  # fmt: skip


def test_arrays_appends_comments_and_both_branches(tmp_path: Path) -> None:
    # As in a 175B-style script: positional paths, one array per concern; as in the Llama
    # FP8 script: an array grown with += inside an `if` (every branch is read, in order).
    values = read(
        tmp_path,
        """
        CHECKPOINT_PATH=$1 # <path>
        GPUS_PER_NODE=8
        WORLD_SIZE=$(($GPUS_PER_NODE*4))
        MODEL_ARGS=(
            --num-layers 32
            --seq-length 2048 # tokens per sample
        )
        TRAINING_ARGS=(
            --micro-batch-size 1
            --global-batch-size 1024
            --fp16
        )
        PRECISION=fp8
        EXTRA=()
        if [[ "$PRECISION" == "fp8" ]]; then
            EXTRA+=(
                "--fp8-format hybrid"
                "--fp8-amax-history-len 1024"
            )
        fi
        PARALLEL_ARGS=(
        \t--tensor-model-parallel-size 4
        \t# --pipeline-model-parallel-size 8
        \t--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 4
        )
        PARALLEL_ARGS+=("--sequence-parallel")
        torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \\
            ${MODEL_ARGS[@]} \\
            "${TRAINING_ARGS[@]}" \\
            ${EXTRA[@]} \\
            ${PARALLEL_ARGS[@]} \\
            --save $CHECKPOINT_PATH
        """,
    )
    assert values == {
        "seq_len": 2048, "mbs": 1, "global_batch": 1024, "precision": "fp8", "tp": 4, "pp": 2,
        "vpp": 4,  # 32 layers / (2 stages x 4 layers per virtual stage)
        "sequence_parallel": True,
    }  # fmt: skip


def test_sizes_with_defaults_and_exports(tmp_path: Path) -> None:
    values = read(
        tmp_path,
        """
        TP_SIZE=${TP_SIZE:-4}
        export PP_SIZE=${PP_SIZE:=2}
        declare -r MBS=1
        GBS="${1:-256}"
        : "${CP:=1}"
        torchrun pretrain_gpt.py --tensor-model-parallel-size ${TP_SIZE} \\
            --pipeline-model-parallel-size "$PP_SIZE" --context-parallel-size $CP \\
            --micro-batch-size=$MBS --global-batch-size ${GBS}
        """,
    )
    assert values == {"tp": 4, "pp": 2, "cp": 1, "mbs": 1, "global_batch": 256}


def test_tensor_parallel_1_disables_sequence_parallel(tmp_path: Path) -> None:
    # Megatron-LM validate_args: "Disabling sequence parallelism because tensor model
    # parallelism is disabled" (tp 1 is its default).
    values = read(tmp_path, "TP=1\nARGS=(--tensor-model-parallel-size $TP --sequence-parallel)\n"
                  'python pretrain_gpt.py "${ARGS[@]}"\n')  # fmt: skip
    assert values == {"tp": 1}


def test_bash_word_rules() -> None:
    # quoted: one word (Megatron-LM's argparse would refuse it); unquoted: split at blanks
    assert words('A="--tp 2"\ncmd "$A" $A\n') == ["cmd", "--tp 2", "--tp", "2"]
    # quotes inside a value are not parsed again, as in bash
    assert words("A=\"--split '99,1,0'\"\ncmd $A\n") == ["cmd", "--split", "'99,1,0'"]
    # an empty array and "$@" give no word; "" gives an empty one
    assert words('E=()\ncmd "${E[@]}" "$@" ""\n') == ["cmd", ""]
    # ${A[*]} quoted joins with blanks; `+` gives its word only when set
    assert words('A=(x y)\ncmd "${A[*]}" ${A[@]+"${A[@]}"} ${B+b}\n') == ["cmd", "x y", "x", "y"]
    # a later assignment does not change what an earlier command got
    assert words("cmd $X\nX=1\ncmd $X\n") == ["cmd", "$X", "cmd", "1"]
    # not set by the script, $(...) and arithmetic stay as written
    assert words('cmd $HOME "$(date +%s)" $((1 + 2)) ${#A}\n') == [
        "cmd", "$HOME", "$(date +%s)", "$((1 + 2))", "${#A}"]  # fmt: skip


def test_an_expanded_word_names_the_line_of_its_flag(tmp_path: Path) -> None:
    text = """
        GPT_ARGS="--num-layers 32
                  --global-batch-size many"
        torchrun pretrain_gpt.py $GPT_ARGS
    """
    with pytest.raises(InputError, match=r"train.sh:2: --global-batch-size: expected a whole "
                       r"number \(digits 0-9\), got 'many'$"):  # fmt: skip
        read(tmp_path, text)


def test_a_variable_the_script_does_not_set_is_left_to_the_flags(tmp_path: Path) -> None:
    """A size whose value bash would take from the environment is left to the check's flag
    (render/readers.py require_given raises this line where none gives it)."""
    values = read(
        tmp_path, "ARGS=(--global-batch-size 8)\ncmd ${ARGS[@]} --tensor-model-parallel-size $TP\n"
    )
    [(why, where)] = values.pop(UNFILLED).values()
    assert values == {"global_batch": 8}
    assert str(InputError(why, where)) == (
        f"{tmp_path / 'train.sh'}:2: --tensor-model-parallel-size: expected a whole number "
        "(digits 0-9), got '$TP' (a variable the script does not set; the environment is not "
        "read): give --tp"
    )
    # a later value stands, as argparse takes it
    later = read(tmp_path, "cmd --tensor-model-parallel-size $TP --tensor-model-parallel-size 2\n")
    assert later == {"tp": 2}
    # the environment is not read
    assert read(tmp_path, "cmd --data-path $HOME --global-batch-size 8\n") == {"global_batch": 8}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("A=x\n" + 'A="$A$A"\n' * 40 + "cmd $A\n",
         f"expanding variables gives more than {MAX_EXPANDED_CHARS:,} characters "
         "(a variable that doubles itself?)"),
        ("cmd " + "${A:-" * (MAX_NESTING + 1) + "x" + "}" * (MAX_NESTING + 1) + "\n",
         f"expansions nested more than {MAX_NESTING} deep"),
        ("A=(--tp 2\ncmd\n", "No closing parenthesis for A=( (is a quote unbalanced?)"),
        ("cmd $(date\n", "No closing parenthesis (is a quote unbalanced?)"),
        ("cmd ${A:-x\n", "No closing brace (is a quote unbalanced?)"),
    ],
)  # fmt: skip
def test_hostile_scripts_are_refused_in_one_line(text: str, message: str, tmp_path: Path) -> None:
    with hang_guard(), pytest.raises(InputError) as caught:
        read(tmp_path, text)
    assert str(caught.value).startswith(f"{tmp_path / 'train.sh'}:")
    assert str(caught.value).endswith(f": cannot split into shell words: {message}")


# Large scripts: the words are right and a runaway (quadratic appends, re-scanning) is stopped
# by the hang guard; their speed is printed by benchmarks/script_speed.py.
LARGE_SCRIPTS = {
    "appends": ("A=()\n" + "A+=(--tp)\n" * 20_000 + 'cmd "${A[@]}"\n', 20_001),
    "string_appends": ("A=x\n" + "A+=x\n" * 40_000 + "cmd $A\n", 2),
    "quoted_expansions": ("cmd " + '"$X"' * 50_000 + "\n", 2),
    "long_assignment": ("X=" + "'a'" * 80_000 + "\ncmd\n", 1),
}


@pytest.mark.parametrize(("text", "words"), LARGE_SCRIPTS.values(), ids=LARGE_SCRIPTS)
def test_large_scripts_are_read_whole(text: str, words: int) -> None:
    with hang_guard():
        found = script_words(text)
    assert len(found) == words
    assert found[0][0] == "cmd"


# ---- case: the branch the script's own value selects ---------------------------------------------


def test_a_case_on_the_scripts_own_value_reads_only_its_branch() -> None:
    """Megatron-LM's examples/mamba/train.sh picks its model with `case "${MODEL_SCALE}"` after
    MODEL_SCALE="800M": bash runs that branch alone, and so does the reader (its assignments
    included; a `*)` after the match is not taken)."""
    text = (
        'MODEL_SCALE="800M"\n'
        'case "${MODEL_SCALE}" in\n'
        '    "800M")\n        TP=1\n        GBS=32\n        ;;\n'
        '    8B|"8*")\n        TP=4\n        GBS=8\n        ;;\n'
        '    *)\n        echo "Invalid version specified"\n        exit 1\n        ;;\n'
        "esac\n"
        "torchrun pretrain_mamba.py --tensor-model-parallel-size $TP --global-batch-size $GBS\n"
    )
    assert [w for w, _ in script_words(text)] == [
        "torchrun", "pretrain_mamba.py", "--tensor-model-parallel-size", "1",
        "--global-batch-size", "32",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("subject", "value"),
    [
        ("S=70b", "glob"),  # a glob pattern matches
        ("S='8*'", "quoted"),  # a quoted pattern is itself: "8*" matches only 8*
        ("S=8b", "other"),  # neither: the `*)` branch
        # from the environment's default, or a name the script does not set: every branch is
        # read, the last assignment standing (as before case was read)
        ("S=${S:-8b}", "other"),
        ("", "other"),
    ],
)
def test_case_patterns_and_values_from_the_environment(subject: str, value: str) -> None:
    text = (
        f"{subject}\ncase $S in\n"
        ' "8*") A=quoted ;;\n'
        " *0b|*0B) A=glob ;;\n"
        " *) A=other ;;\n"
        "esac\ncmd --x $A\n"
    )
    assert [w for w, _ in script_words(text)] == ["cmd", "--x", value]


def test_an_undecided_case_reads_every_branch() -> None:
    text = "case $FROM_ENV in\n a) cmd --a ;;\n b) cmd --b ;;\nesac\n"
    assert [w for w, _ in script_words(text)] == ["cmd", "--a", "cmd", "--b"]


def test_nested_cases_and_an_if_inside_a_branch_not_taken() -> None:
    text = (
        "A=x\nB=y\n"
        "case $A in\n"
        "  x) case $B in\n      y) cmd --inner ;;\n      *) cmd --not ;;\n    esac ;;\n"
        "  *) if true; then cmd --skipped; fi\n     X=1 ;;\n"
        "esac\ncmd --x ${X:-unset}\n"
    )
    assert [w for w, _ in script_words(text)] == ["cmd", "--inner", "cmd", "--x", "unset"]


@pytest.mark.parametrize(
    ("text", "read"),
    [
        # ;& runs on into the next branch, ;;& tests the next patterns too: every branch from there
        ("case b in a) X=1 ;& b) Y=2 ;; esac\ncmd ${Y:-u}\n", "2"),
        ("case ab in a*) X=1 ;;& *b) Y=2 ;; esac\ncmd $Y\n", "2"),
        # a pattern with an expansion, a bracket expression or an escape is not matched here:
        # that branch and the later ones are read (the last assignment stands)
        ("S=a\nP=b\ncase $S in $P) X=1 ;; *) X=2 ;; esac\ncmd $X\n", "2"),
        ("case b in [^a]) X=neg ;; *) X=other ;; esac\ncmd $X\n", "other"),
        ("case x in \\*) X=star ;; *) X=other ;; esac\ncmd $X\n", "other"),
        # a value from the environment's default, also by := or through another name, or one
        # assigned inside an `if` (read both ways): every branch, the last assignment standing
        (": ${S:=8b}\ncase $S in 8b) X=1 ;; *) X=2 ;; esac\ncmd $X\n", "2"),
        ("E2=${E:-8b}\nS=$E2\ncase $S in 8b) X=1 ;; *) X=2 ;; esac\ncmd $X\n", "2"),
        ("A=(${E:-8b})\ncase $A in 8b) X=1 ;; *) X=2 ;; esac\ncmd $X\n", "2"),
        ('if [ -n "$E" ]; then S=70b; else S=8b; fi\ncase $S in 70b) X=1 ;; *) X=2 ;; esac\n'
         "cmd $X\n", "2"),
        ("case $E in a) S=70b ;; esac\ncase $S in 70b) X=1 ;; *) X=2 ;; esac\ncmd $X\n", "2"),
        # a default assigned in a branch bash does not take is not assigned
        ("case a in b) Y=${Z:=5} ;; esac\ncmd ${Z:-unset}\n", "unset"),
    ],
)  # fmt: skip
def test_what_a_case_cannot_decide_here_reads_every_branch(text: str, read: str) -> None:
    assert [w for w, _ in script_words(text)][-1] == read


def test_many_case_patterns_are_matched_in_linear_time() -> None:
    """Plain-text patterns are compared, not compiled; the subject and each pattern are
    bounded (MAX_CASE_SUBJECT_CHARS, MAX_CASE_PATTERN_CHARS)."""
    patterns = "|".join(f"p{i}" for i in range(30000))
    text = f"S=p29999\ncase $S in {patterns}) cmd --found ;; esac\n"
    with hang_guard():
        assert [w for w, _ in script_words(text)] == ["cmd", "--found"]
