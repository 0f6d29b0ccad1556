"""The names only `parplan plan`'s extra requests give a formula: the memory headroom a plan
keeps (train.memory_headroom, train.memory_headroom_share) and the training budget's inputs
(budget.*, read by the rules of rules/budget/ in the `budget` context). Part of the one
vocabulary (`vocabulary.NAMES`)."""

from __future__ import annotations

MEMORY_HEADROOM = "train.memory_headroom"  # bytes kept free whatever the layout
MEMORY_HEADROOM_SHARE = "train.memory_headroom_share"  # the share of its tensors besides
# (name, kind, unit, doc), as vocabulary.Name takes them.
PLAN_REQUEST_NAMES: tuple[tuple[str, str, str, str], ...] = (
    (
        MEMORY_HEADROOM,
        "number",
        "bytes",
        "Memory per GPU a plan keeps free whatever its layout (`plan --headroom 4` or "
        "`10%`, of the GPU's memory); 0 by default and for `estimate` and `check`.",
    ),
    (
        MEMORY_HEADROOM_SHARE,
        "number",
        "fraction",
        "Share of a layout's tensors (its memory less `other`) a plan keeps free besides: the "
        "rule `memory_headroom_share_default` when `plan --headroom` is not given, else 0; 0 "
        "for `estimate` and `check`.",
    ),
    # budget.*: what `plan --tokens` asks and the cluster's budget figures (rules/budget/)
    ("budget.tokens", "number", "tokens", "Tokens to train (`plan --tokens`)."),
    (
        "budget.mtbf_gpu_hours",
        "number",
        "GPU-hours",
        "Mean time between unexpected interruptions per GPU (cluster file, else the default rule).",
    ),
    (
        "budget.storage_bytes_per_s",
        "number",
        "bytes/s",
        "Checkpoint write bandwidth of the job's storage (cluster file, else the default rule).",
    ),
    (
        "budget.host_bytes_per_s",
        "number",
        "bytes/s",
        "Host link of one GPU, one direction (parplan_gen/data/host_links.yaml; 0 when the GPU "
        "has no figure there).",
    ),
    (
        "budget.gpu_hour_price",
        "number",
        "currency/GPU-hour",
        "Price of one GPU-hour (`--gpu-hour-price` or the cluster file; 0 when none is given).",
    ),
)

# The default headroom rule (rules/constraints/headroom.yaml), evaluated by planning/pins.py,
# and what the memory rule keeps free of one layout, evaluated by planning/evaluate.py to
# show it beside the estimate (MemoryBreakdown.kept_free).
MEMORY_HEADROOM_SHARE_DEFAULT = "memory_headroom_share_default"
MEMORY_KEPT_FREE = "memory_kept_free"
# Named formulas parplan's own code evaluates by name (planning/pins.py, planning/budget.py):
# used, though no rule reads them (`parplan rules check` counts them as used).
READ_BY_CODE: tuple[str, ...] = (
    MEMORY_HEADROOM_SHARE_DEFAULT,
    MEMORY_KEPT_FREE,
    # the defaults of plan's search options (rules/search/defaults.yaml,
    # planning/search_choices.py DEFAULT_FORMULAS)
    "search_interleave_default",
    "search_sequence_parallel_default",
    "search_overlap_grad_reduce_default",
    "search_grad_reduce_dtype_default",
    "search_fp8_param_gather_default",
    "search_precision_aware_optimizer_default",
    "search_activation_offload_default",
    "search_fsdp_reshard_default",
    "search_activation_offload_parts",
    "budget_mtbf_gpu_hours_default",
    "budget_storage_bytes_per_s_per_gpu_default",
    "budget_tokens_per_step",
    "budget_steps",
    "budget_compute_s",
    "budget_checkpoint_bytes",
    "budget_checkpoint_write_s",
    "budget_checkpoint_async",
    "budget_checkpoint_blocking_s",
    "budget_restart_s",
    "budget_checkpoint_interval_s",
    "budget_checkpoints",
    "budget_job_mtbf_s",
    "budget_interruptions",
    "budget_progress",
    "budget_checkpoint_s",
    "budget_lost_s",
    "budget_wall_s",
    "budget_compute_gpu_hours",
    "budget_gpu_hours",
    "budget_cost",
)
