#!/usr/bin/env bash
# Megatron-LM (core_r0.13) pretraining of llama-2-7b, as parplan planned it:
# dp 8 x tp 1 x pp 1 x cp 1 = 8 GPUs (1 node(s) x 8).
# Generated from plan.json by `parplan render`: change the plan, then render again.
#
# Run it on every node (torchrun's c10d rendezvous numbers the nodes), or submit
# launch_slurm.sbatch. Extra arguments are appended; a later flag overrides an earlier one.
# Environment (all optional):
#   MEGATRON_LM_DIR   Megatron-LM checkout holding pretrain_gpt.py (default: the current folder)
#   DATA_PATH         dataset prefix(es), space-separated; unset: --mock-data, NullTokenizer
#   TOKENIZER_MODEL   tokenizer name or path, required with DATA_PATH
#   CKPT_DIR          checkpoint folder for --save and --load (unset: no checkpoints)
#   MASTER_ADDR       rendezvous host (default: localhost)
#   NNODES, NPROC_PER_NODE  nodes and GPUs per node (default: the plan's)
#   SPLIT             train,valid,test split of DATA_PATH (--split) (default 99,1,0)
#   TOKENIZER_TYPE    --tokenizer-type for TOKENIZER_MODEL (default HuggingFaceTokenizer)
#   SAVE_INTERVAL     steps between checkpoints (with CKPT_DIR) (default 1000)
#   MASTER_PORT       torchrun rendezvous port (default 29500)
#   TRAIN_ITERS       optimizer steps (default: a smoke run) (default 100)
#   LR                peak learning rate (default 3.0e-4)
#   MIN_LR            final learning rate (default 3.0e-5)
#   LOG_INTERVAL      steps between log lines (default 10)
#   EVAL_INTERVAL     steps between evaluations (default 1000)
#   EVAL_ITERS        batches per evaluation (default 10)
#
# Notes:
#   - the plan's estimate assumes ZeRO-3; Megatron-LM has no such stage, so the script uses
#     --use-distributed-optimizer (optimizer states only): more memory per GPU than estimated.
#   - set --rotary-base to the model's RoPE theta (plan.json does not record it; Megatron-LM's
#     default is 10000).
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -f "$SCRIPT_DIR/nccl.env" ]]; then
    set -a
    # shellcheck source=/dev/null
    source "$SCRIPT_DIR/nccl.env"
    set +a
fi

# model shape
MODEL_ARGS=(
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 11008
    --num-attention-heads 32
    --kv-channels 128
    --seq-length 4096
    --max-position-embeddings 4096
    --position-embedding-type rope
    --normalization RMSNorm
    --swiglu
    --untie-embeddings-and-output-weights
    --disable-bias-linear
)

# mixture of experts
MOE_ARGS=(
)

# parallelism
PARALLEL_ARGS=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 1
    --context-parallel-size 1
    --use-distributed-optimizer
)

# batch, memory and precision
TRAINING_ARGS=(
    --micro-batch-size 2
    --global-batch-size 64
    --recompute-granularity full
    --recompute-method uniform
    --recompute-num-layers 1
    --fp16
    --clip-grad 1.0
)

# run length and logging
RUN_ARGS=(
    --train-iters "${TRAIN_ITERS:-100}"
    --lr "${LR:-3.0e-4}"
    --min-lr "${MIN_LR:-3.0e-5}"
    --log-interval "${LOG_INTERVAL:-10}"
    --eval-interval "${EVAL_INTERVAL:-1000}"
    --eval-iters "${EVAL_ITERS:-10}"
)

if [[ -n "${DATA_PATH:-}" ]]; then
    read -r -a DATA_PREFIXES <<< "$DATA_PATH"
    DATA_ARGS=(
        --data-path "${DATA_PREFIXES[@]}"
        --split "${SPLIT:-99,1,0}"
        --tokenizer-type "${TOKENIZER_TYPE:-HuggingFaceTokenizer}"
        --tokenizer-model "${TOKENIZER_MODEL:?set TOKENIZER_MODEL to the tokenizer of DATA_PATH}"
    )
else
    # No data given: synthetic batches, so the script validates and smoke-runs as it is.
    DATA_ARGS=(--mock-data --tokenizer-type NullTokenizer --vocab-size 32000)
fi

CKPT_ARGS=()
if [[ -n "${CKPT_DIR:-}" ]]; then
    CKPT_ARGS=(--save "$CKPT_DIR" --load "$CKPT_DIR" --save-interval "${SAVE_INTERVAL:-1000}")
fi

RDZV_HOST="${MASTER_ADDR:-localhost}"
exec torchrun \
    --nnodes "${NNODES:-1}" \
    --nproc_per_node "${NPROC_PER_NODE:-8}" \
    --rdzv_backend c10d \
    --rdzv_endpoint "$RDZV_HOST:${MASTER_PORT:-29500}" \
    --rdzv_id "${RDZV_ID:-parplan-llama-2-7b}" \
    "${MEGATRON_LM_DIR:-.}/pretrain_gpt.py" \
    ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"} \
    ${MOE_ARGS[@]+"${MOE_ARGS[@]}"} \
    ${PARALLEL_ARGS[@]+"${PARALLEL_ARGS[@]}"} \
    ${TRAINING_ARGS[@]+"${TRAINING_ARGS[@]}"} \
    "${RUN_ARGS[@]}" \
    "${DATA_ARGS[@]}" \
    ${CKPT_ARGS[@]+"${CKPT_ARGS[@]}"} \
    "$@"
