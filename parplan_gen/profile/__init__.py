"""`parplan profile`: measure the per-operation curves (GEMM, attention, memory copy,
collectives) on the user's own GPUs and write them as a cluster file's `measured:` section
(`parplan_gen.cost.measured`). torch is loaded only here, when a profile runs (`runtime`).
"""
