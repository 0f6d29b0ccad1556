#!/usr/bin/env bash
# Megatron-LM (core_v0.16) pretraining of llama-3-8b, as parplan planned it:
# dp 8 x tp 2 x pp 2 x cp 1 = 32 GPUs (4 node(s) x 8).
# Generated from plan.json by `parplan render`: change the plan, then render again.
#
# Run it on every node (torchrun's c10d rendezvous numbers the nodes), or submit
# launch_slurm.sbatch. Extra arguments are appended; a later flag overrides an earlier one.
# Environment (required):
#   MEGATRON_LM_DIR   Megatron-LM checkout (core_v0.16) holding pretrain_gpt.py
#   DATA_PATH         dataset prefix(es), space-separated; or MOCK_DATA=1 instead
# Environment (optional):
#   MOCK_DATA=1       without DATA_PATH: synthetic batches (--mock-data, NullTokenizer), a smoke run
#   TOKENIZER_MODEL   tokenizer name or path, required with DATA_PATH
#   CKPT_DIR          checkpoint folder for --save and --load (unset: no checkpoints, said on stderr)
#   MASTER_ADDR       rendezvous host (required: the first node)
#   NNODES, NPROC_PER_NODE  nodes and GPUs per node (default: the plan's)
#   SPLIT             train,valid,test split of DATA_PATH (--split) (default 99,1,0)
#   TOKENIZER_TYPE    --tokenizer-type for TOKENIZER_MODEL (default HuggingFaceTokenizer)
#   SAVE_INTERVAL     steps between checkpoints, with CKPT_DIR (the budget's interval where it has one) (default 1000)
#   MASTER_PORT       torchrun rendezvous port (default 29500)
#   TRAIN_ITERS       optimizer steps (the budget's where the plan has one, else a smoke run) (default 100)
#   LR                peak learning rate (default 3.00e-04)
#   MIN_LR            final learning rate (default 3.00e-05)
#   LOG_INTERVAL      steps between log lines (default 10)
#   EVAL_INTERVAL     steps between evaluations (default 1000)
#   EVAL_ITERS        batches per evaluation (default 10)
#
# Notes:
#   - optimizer schedule published for this model (parplan_gen/data/lr_schedule.yaml, in place of
#     GPT-3's Table 2.1): peak LR 3.00e-04, min LR 3.00e-05, cosine decay after a linear warmup of
#     0.001442 of it, weight decay 0.1, Adam betas 0.9/0.95 and eps 1e-08; source: Llama Team
#     2024, "The Llama 3 Herd of Models" (arXiv:2407.21783), Table 3 (peak learning rate 3e-4 for
#     8B). What it does not give is GPT-3 Appendix B's. LR and MIN_LR override the rates.
#   - SLURM time limit: --exit-duration-in-mins 2869 saves (with CKPT_DIR) and exits before it,
#     and --exit-signal-handler saves on SIGTERM; resubmit the job to go on from the checkpoint.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -f "$SCRIPT_DIR/nccl.env" ]]; then
    set -a
    # shellcheck source=/dev/null
    source "$SCRIPT_DIR/nccl.env"
    set +a
fi
# Megatron-LM validate_args: tensor/context parallelism before Blackwell needs one CUDA work queue.
export CUDA_DEVICE_MAX_CONNECTIONS=1

# model shape
MODEL_ARGS=(
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --kv-channels 128
    --group-query-attention
    --num-query-groups 8
    --seq-length 8192
    --max-position-embeddings 8192
    --position-embedding-type rope
    --normalization RMSNorm
    --swiglu
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --rotary-base 500000
    --norm-epsilon 1e-05
    --attention-dropout 0.0
    --hidden-dropout 0.0
)

# mixture of experts
MOE_ARGS=(
)

# parallelism
PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 2
    --sequence-parallel
    --tp-comm-overlap
    --context-parallel-size 1
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)

# batch, memory and precision
TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 512
    --recompute-granularity selective
    --cross-entropy-loss-fusion
    --cross-entropy-fusion-impl te
    --bf16
    --clip-grad 1.0
    --lr-decay-style cosine
    --lr-warmup-fraction 0.001442
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --adam-eps 1e-08
    --log-throughput
    --exit-duration-in-mins 2869
    --exit-signal-handler
)

# run length and logging
RUN_ARGS=(
    --train-iters "${TRAIN_ITERS:-100}"
    --lr "${LR:-3.00e-04}"
    --min-lr "${MIN_LR:-3.00e-05}"
    --log-interval "${LOG_INTERVAL:-10}"
    --eval-interval "${EVAL_INTERVAL:-1000}"
    --eval-iters "${EVAL_ITERS:-10}"
)

MEGATRON_LM_DIR="${MEGATRON_LM_DIR:?set MEGATRON_LM_DIR to the Megatron-LM checkout holding pretrain_gpt.py}"
if [[ ! -f "$MEGATRON_LM_DIR/pretrain_gpt.py" ]]; then
    echo "megatron_args.sh: MEGATRON_LM_DIR=$MEGATRON_LM_DIR holds no pretrain_gpt.py: set it to a Megatron-LM checkout (core_v0.16)" >&2
    exit 2
fi

if [[ -n "${DATA_PATH:-}" ]]; then
    read -r -a DATA_PREFIXES <<< "$DATA_PATH"
    DATA_ARGS=(
        --data-path "${DATA_PREFIXES[@]}"
        --split "${SPLIT:-99,1,0}"
        --tokenizer-type "${TOKENIZER_TYPE:-HuggingFaceTokenizer}"
        --tokenizer-model "${TOKENIZER_MODEL:?set TOKENIZER_MODEL to the tokenizer of DATA_PATH}"
    )
elif [[ "${MOCK_DATA:-}" == 1 ]]; then
    # Asked for: synthetic batches, so the script validates and smoke-runs without data.
    DATA_ARGS=(--mock-data --tokenizer-type NullTokenizer --vocab-size 128255)
else
    echo "megatron_args.sh: DATA_PATH is not set: set it to the dataset prefix(es), or MOCK_DATA=1 for a smoke run on synthetic data" >&2
    exit 2
fi

CKPT_ARGS=()
if [[ -n "${CKPT_DIR:-}" ]]; then
    CKPT_ARGS=(--save "$CKPT_DIR" --load "$CKPT_DIR" --save-interval "${SAVE_INTERVAL:-1000}")
else
    echo "megatron_args.sh: CKPT_DIR is not set: this run saves no checkpoint" >&2
fi

RDZV_HOST="${MASTER_ADDR:?set MASTER_ADDR to the address of the first node}"
exec torchrun \
    --nnodes "${NNODES:-4}" \
    --nproc_per_node "${NPROC_PER_NODE:-8}" \
    --rdzv_backend c10d \
    --rdzv_endpoint "$RDZV_HOST:${MASTER_PORT:-29500}" \
    --rdzv_id "${RDZV_ID:-parplan-llama-3-8b}" \
    "$MEGATRON_LM_DIR/pretrain_gpt.py" \
    ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"} \
    ${MOE_ARGS[@]+"${MOE_ARGS[@]}"} \
    ${PARALLEL_ARGS[@]+"${PARALLEL_ARGS[@]}"} \
    ${TRAINING_ARGS[@]+"${TRAINING_ARGS[@]}"} \
    "${RUN_ARGS[@]}" \
    "${DATA_ARGS[@]}" \
    ${CKPT_ARGS[@]+"${CKPT_ARGS[@]}"} \
    "$@"
