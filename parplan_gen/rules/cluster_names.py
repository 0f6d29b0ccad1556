"""The cluster.* names a formula may read: the GPUs and links of the job, from the hardware
catalog or a cluster file (cost/estimate.py `cluster_env` gives their values). Part of the one
vocabulary (`vocabulary.NAMES`)."""

from __future__ import annotations

# (name, kind, unit, doc), as vocabulary.Name takes them.
CLUSTER_NAMES: tuple[tuple[str, str, str, str], ...] = (
    ("cluster.gpus", "number", "GPUs", "GPUs in the job (the world size)."),
    ("cluster.gpus_per_node", "number", "GPUs", "GPUs per node."),
    ("cluster.nvlink_domain", "number", "GPUs", "GPUs of the job on one NVLink fabric (<= gpus)."),
    ("cluster.nodes", "number", "nodes", "Nodes."),
    ("cluster.gpu_memory", "number", "bytes", "Memory of one GPU."),
    ("cluster.peak_flops", "number", "FLOP/s", "Dense peak of one GPU at train.precision."),
    (
        "cluster.peak_flops_16bit",
        "number",
        "FLOP/s",
        "Dense 16-bit peak of one GPU (FP16 for an fp16 run, else BF16): what the matmuls that "
        "stay in 16 bits under FP8 (attention scores, LM head) run at.",
    ),
    (
        "cluster.gemm_max_fraction",
        "number",
        "-",
        "The GPU vendor's own measured maximum-achievable GEMM rate at train.precision over "
        "the dense peak it was measured against (the catalog's max_achievable_tflops: AMD's "
        "'MAF'; a cluster file's overridden peak keeps the fraction); 0 where the vendor "
        "publishes none.",
    ),
    (
        "cluster.gemm_max_fraction_16bit",
        "number",
        "-",
        "cluster.gemm_max_fraction at the 16-bit precision of cluster.peak_flops_16bit.",
    ),
    (
        "cluster.measured_gemm_fraction",
        "number",
        "-",
        "The fastest GEMM at train.precision a cluster file's `measured:` section (`parplan "
        "profile`) records, over the dense peak at that precision; 0 when not profiled at it.",
    ),
    (
        "cluster.measured_gemm_fraction_16bit",
        "number",
        "-",
        "The fastest 16-bit GEMM a cluster file's `measured:` section (`parplan profile`) "
        "records, over the 16-bit dense peak; 0 when the cluster was not profiled.",
    ),
    (
        "cluster.measured_attention_max_fraction",
        "number",
        "-",
        "E of the causal forward+backward attention (SDPA) rate a cluster file's `measured:` "
        "section records, fitted as E x L / (L + L_half) over the 16-bit dense peak; 0 when "
        "the cluster was not profiled at two lengths or more.",
    ),
    (
        "cluster.measured_attention_half_seq",
        "number",
        "tokens",
        "L_half of that fit; 0 when not profiled.",
    ),
    (
        "cluster.measured_intra_bus_bandwidth",
        "number",
        "bytes/s",
        "The largest ring-collective bus bandwidth a cluster file's `measured:` section records "
        "inside a node, per GPU; 0 when not profiled.",
    ),
    (
        "cluster.measured_inter_bus_bandwidth",
        "number",
        "bytes/s",
        "The largest ring-collective bus bandwidth it records across nodes, over the GPUs of a "
        "node; 0 when not profiled.",
    ),
    (
        "cluster.measured_context_bytes",
        "number",
        "bytes",
        "The device memory a cluster file's `measured:` section records in use outside "
        "PyTorch's caching allocator before any process group (the CUDA context with the "
        "kernels its sweeps loaded); 0 when not profiled on a GPU.",
    ),
    (
        "cluster.measured_host_launch_s",
        "number",
        "s",
        "The host time per BF16 grouped-GEMM launch of Transformer Engine's expert layer that a "
        "cluster file's `measured:` section records (Python, PyTorch and TE work included); 0 "
        "when not profiled on a GPU with Transformer Engine installed. The built-in rules do "
        "not price from it (rules/cost/efficiency.yaml `host_launch_s`).",
    ),
    ("cluster.hbm_bandwidth", "number", "bytes/s", "Memory bandwidth of one GPU."),
    (
        "cluster.intra_bandwidth",
        "number",
        "bytes/s",
        "GPU-to-GPU bandwidth in a node, per GPU, one direction.",
    ),
    ("cluster.intra_latency", "number", "s", "Latency of one step over the intra-node link."),
    ("cluster.inter_bandwidth", "number", "bytes/s", "Network bandwidth per GPU, one direction."),
    ("cluster.inter_latency", "number", "s", "Latency of one step over the network."),
    (
        "cluster.host_bandwidth",
        "number",
        "bytes/s",
        "Host link of one GPU, one direction (parplan_gen/data/host_links.yaml: PCIe, or "
        "GB200/GB300's share of NVLink-C2C); 0 when the GPU has no figure there.",
    ),
    (
        "cluster.host_memory",
        "number",
        "bytes",
        "Host (CPU) memory per GPU: a cluster file's host_memory_gb_per_node over its GPUs per "
        "node, else the GPU's reference system's (parplan_gen/data/gpus.yaml "
        "reference_node.host_memory_gb, from published system descriptions); 0 when neither "
        "gives one.",
    ),
    ("cluster.nvswitch", "bool", "-", "The node has an NVSwitch (all-to-all NVLink)."),
    (
        "cluster.intra_node_link",
        "str",
        "-",
        "How the GPUs of a node talk: 'nvlink', 'xgmi' or 'pcie' (the catalog's "
        "intra_node_link, or a cluster file's override).",
    ),
    (
        "cluster.architecture",
        "str",
        "-",
        "GPU architecture from the catalog: 'volta', 'ampere', 'ada', 'hopper', 'blackwell', "
        "'cdna3', 'cdna4'.",
    ),
)
