"""Hand-worked FLOP counts for the sanity tests (tests/test_sanity.py, test_planner_sanity.py):
the causal fraction of each plan's model at its sequence and each best published run on the
causal count (parplan_gen/data/published_best.yaml header), written out from the models'
configs (parplan_gen/data/models/) and the runs' published shapes."""

from __future__ import annotations


def causal(dense: float, scores: float) -> float:
    """(matmuls + half the score FLOPs) / (matmuls + all of them): the causal count over the
    whole-matrix count (published_best.yaml header)."""
    return (dense + scores / 2) / (dense + scores)


# Forward FLOPs per token of the plans' models (their configs in parplan_gen/data/models/):
# matmuls 2 x multiply-adds, QK^T and AV 2 x heads x (d_qk + d_v) x seq x layers.
#  - llama-3-8b, seq 8192: per layer q/o 2 x 4096 x 4096 + k/v 2 x 4096 x 1024 + SwiGLU
#    3 x 4096 x 14336 = 218,103,808, x 32 layers + LM head 4096 x 128,256 = 7,504,658,432;
#    scores 2 x 32 x 256 x 8192 x 32 = 4,294,967,296.
LLAMA_8B_8192 = causal(2 * 7_504_658_432, 4_294_967_296)
#  - llama-3-70b, seq 8192: per layer 2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x 28672 =
#    855,638,016, x 80 + 8192 x 128,256 = 69,501,714,432; scores 2 x 64 x 256 x 8192 x 80.
LLAMA_70B_8192 = causal(2 * 69_501_714_432, 21_474_836_480)
#  - gpt3-175b, seq 2048: per layer 12 x 12288^2 = 1,811,939,328, x 96 + 12288 x 51,200 =
#    174,575,321,088; scores 2 x 96 x 256 x 2048 x 96.
GPT3_2048 = causal(2 * 174_575_321_088, 9_663_676_416)
# The bests on the causal count, from their shapes (2 x params, 4 x layers x width x seq):
HOPPER_SMALL = 0.49 * causal(2 * 16.0e9, 4 * 32 * 6144 * 4096)  # Megatron-Core 16B, seq 4096
HOPPER_MEDIUM = 0.4392 * causal(2 * 29.98e9, 4 * 48 * 7168 * 2048)  # MPT-30B, seq 2048
AMPERE_LARGE = 0.563 * causal(2 * 1008e9, 4 * 128 * 25600 * 2048)  # Korthikanti 1T, seq 2048
# Llama-3-405B at seq 8192: per layer 2 x 16384^2 + 2 x 16384 x 1024 + 3 x 16384 x 53248 =
# 3,187,671,040 multiply-adds, x 126 + LM head 16384 x 128,256 = 403,747,897,344; scores
# 2 x 128 x 256 x 8192 x 126 = 67,645,734,912. Best: Megatron-Core 462B (112 layers, width
# 18432, seq 4096) at 47 %.
LLAMA_405B_8192 = causal(2 * 403_747_897_344, 67_645_734_912)
HOPPER_LARGE = 0.47 * causal(2 * 462e9, 4 * 112 * 18432 * 4096)
# FP8: Megatron-LM's Llama 3 8B example, 800 TFLOP/s at seq 8192 over the H100's 1979 FP8 peak,
# on the whole-matrix count (800 / 13,812 tokens/s = 57.9 GFLOP per token: 6 x its 7.50B matmul
# weights + 3 x the 4.29 GFLOP of scores above; published_best.yaml); its shape as the
# calibration row gives it (8B).
HOPPER_SMALL_FP8 = 800 / 1979 * causal(2 * 8.0e9, 4 * 32 * 4096 * 8192)
