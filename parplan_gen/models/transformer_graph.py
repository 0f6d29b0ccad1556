"""Expand a transformer (a `ModelSpec`, read as its `TransformerCounts`) into its per-layer op
graph (a `ModelGraph` the rules engine can read).

One node per operation a token passes through, in execution order:

    embedding [-> embedding_norm]
    per layer i (ids `layers.<i>.*`):
      input_norm -> attention.qkv (MatMul) -> attention.core (Attention) -> attention.out (MatMul)
      -> attention.residual (Add)
      mlp_norm -> mlp.fc1 (MatMul) -> mlp.act (Activation) -> mlp.fc2 (MatMul) -> mlp.residual
      or, in an MoE layer: moe.router (Router) -> moe.experts (Experts)
                           [+ moe.shared.fc1 -> moe.shared.act -> moe.shared.fc2]
    final_norm -> lm_head

Parallel blocks (GPT-J, NeoX, Falcon) feed attention and MLP from the same block input and
join them in one `residual` Add. The LM head is a `MatMul` that owns its weight when untied,
and an `LMHead` node with no parameters of its own when tied to the embedding (the weight is
counted once, on `embedding`), so rules that shard MatMul weights never see it twice.

Every node carries `params` (count), `flops` (forward FLOPs per token) and `activation_bytes`
(bytes stored per token for backward, 16-bit, Korthikanti 2022 Sec. 4.1). Over the graph they
sum to `spec.total_params()`, `spec.forward_flops_per_token(seq_len)` and
`spec.activation_bytes_per_token(seq_len)`; element-wise nodes have zero FLOPs, as in
Megatron-LM's count.
"""

from __future__ import annotations

from parplan_gen.inputs.defaults import DEFAULT_SEQ_LEN
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.graph import ModelGraph, build_graph
from parplan_gen.models.graph_node import Node
from parplan_gen.models.transformer_activations import ACT_BYTES, LOGIT_BYTES, MASK_BYTES
from parplan_gen.models.transformer_counts import TransformerCounts

Attr = int | float | str | bool


class _Builder:
    """Collects nodes and edges in execution order."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.edges: list[tuple[str, str]] = []

    def add(
        self,
        node_id: str,
        op: str,
        inputs: list[str],
        *,
        params: int = 0,
        flops: float = 0,
        act: int = 0,
        **attrs: Attr,
    ) -> str:
        base: dict[str, Attr] = {"params": params, "flops": flops, "activation_bytes": act}
        self.nodes.append(Node(id=node_id, op=op, attrs=base | attrs))
        self.edges.extend((src, node_id) for src in inputs)
        return node_id


def model_graph(spec: TransformerCounts, *, seq_len: int = DEFAULT_SEQ_LEN) -> ModelGraph:
    """The op graph of `spec` at sequence length `seq_len` (tokens)."""
    if seq_len <= 0:
        raise InputError(f"seq_len must be a positive number of tokens, not {seq_len}")
    b = _Builder()
    h = spec.hidden_size
    emb_norm = spec.norm_params(h) if spec.embedding_norm else 0  # part of embedding_params()
    x = b.add(
        "embedding",
        "Embedding",
        [],
        params=spec.embedding_params() - emb_norm,
        act=MASK_BYTES * h,
        vocab_size=spec.vocab_size,
        hidden_size=h,
        position_embedding=spec.position_embedding,
    )
    if spec.embedding_norm:
        x = b.add("embedding_norm", _norm_op(spec), [x], params=emb_norm, act=ACT_BYTES * h)
    for layer in range(spec.num_layers):
        x = _layer(b, spec, layer, x, seq_len)
    if spec.final_norm:
        x = b.add("final_norm", _norm_op(spec), [x], params=spec.norm_params(h), act=ACT_BYTES * h)
    v = spec.vocab_size
    head_params = spec.output_params() - (spec.norm_params(h) if spec.final_norm else 0)
    b.add(
        "lm_head",
        "LMHead" if spec.tied_embeddings else "MatMul",
        [x],
        params=head_params,
        flops=spec.lm_head_flops_per_token(),
        act=ACT_BYTES * h + LOGIT_BYTES * v,
        role="lm_head",
        tied=spec.tied_embeddings,
        in_features=h,
        out_features=v,
    )
    return build_graph(spec.name, b.nodes, b.edges)


def _norm_op(spec: TransformerCounts) -> str:
    return "LayerNorm" if spec.norm == "layernorm" else "RMSNorm"


def _layer(b: _Builder, spec: TransformerCounts, i: int, x: str, seq_len: int) -> str:
    """Add layer `i` reading the residual stream `x`; return the node holding its output."""
    p, h = f"layers.{i}", spec.hidden_size
    norm_op, norm_params = _norm_op(spec), spec.norm_params(h)
    attn_in = b.add(f"{p}.input_norm", norm_op, [x], params=norm_params, act=ACT_BYTES * h, layer=i)
    attn_out = _attention(b, spec, i, attn_in, seq_len)
    if spec.parallel_attn_mlp:
        mlp_in = attn_in
        if spec.norms_per_layer == 2:
            mlp_in = b.add(
                f"{p}.mlp_norm", norm_op, [x], params=norm_params, act=ACT_BYTES * h, layer=i
            )
        mlp_out = _mlp(b, spec, i, mlp_in, first_input_counted=spec.norms_per_layer == 1)
        mask = 2 * MASK_BYTES * h  # the dropout masks of both branches
        return b.add(f"{p}.residual", "Add", [attn_out, *mlp_out, x], act=mask, layer=i)
    res = b.add(f"{p}.attention.residual", "Add", [attn_out, x], act=MASK_BYTES * h, layer=i)
    mlp_in = b.add(f"{p}.mlp_norm", norm_op, [res], params=norm_params, act=ACT_BYTES * h, layer=i)
    mlp_out = _mlp(b, spec, i, mlp_in, first_input_counted=False)
    return b.add(f"{p}.mlp.residual", "Add", [*mlp_out, res], act=MASK_BYTES * h, layer=i)


def _attention(b: _Builder, spec: TransformerCounts, i: int, x: str, seq_len: int) -> str:
    p, h, a = f"layers.{i}.attention", spec.hidden_size, spec.num_attention_heads
    out_width = a * spec.value_head_dim
    sinks = a if spec.attention_sinks else 0
    qkv_params = spec.attention_params() - spec.attention_output_params() - sinks
    qkv_act = ACT_BYTES * h
    if spec.uses_mla:  # latent norm and up-projection inputs
        qkv_act += 2 * ACT_BYTES * ((spec.q_lora_rank or 0) + (spec.kv_lora_rank or 0))
    qkv = b.add(
        f"{p}.qkv",
        "MatMul",
        [x],
        params=qkv_params,
        flops=2 * (spec.attention_matmul_weights() - out_width * h),
        act=qkv_act,
        layer=i,
        role="qkv",
        in_features=h,
    )
    keys = spec.keys_per_query(i, seq_len)
    core = b.add(
        f"{p}.core",
        "Attention",
        [qkv],
        params=sinks,
        flops=2 * a * (spec.qk_head_dim + spec.value_head_dim) * keys,
        act=spec.attention_core_activation_bytes(seq_len),
        layer=i,
        heads=a,
        kv_heads=spec.kv_heads_stored,
        qk_head_dim=spec.qk_head_dim,
        v_head_dim=spec.value_head_dim,
        seq_len=seq_len,
        keys_per_query=keys,
        sliding_window=(spec.sliding_window or 0) if spec.window_layer_mask[i] else 0,
    )
    return b.add(
        f"{p}.out",
        "MatMul",
        [core],
        params=spec.attention_output_params(),
        flops=2 * out_width * h,
        act=ACT_BYTES * out_width,
        layer=i,
        role="attention_out",
        in_features=out_width,
        out_features=h,
    )


def _mlp(
    b: _Builder, spec: TransformerCounts, i: int, x: str, *, first_input_counted: bool
) -> list[str]:
    """Dense MLP or MoE block of layer `i`; returns the nodes that feed the residual add.
    `first_input_counted`: the block input is already stored by attention (one shared norm)."""
    h = spec.hidden_size
    in_act = 0 if first_input_counted else ACT_BYTES * h
    if not spec.moe_layer_mask[i]:
        return [_ffn(b, spec, f"layers.{i}.mlp", i, x, spec.ffn_hidden_size, 1, in_act)]
    p, e, k = f"layers.{i}.moe", spec.num_experts, spec.experts_per_token
    f = spec.moe_ffn_hidden_size
    router = b.add(
        f"{p}.router",
        "Router",
        [x],
        params=spec.router_params(),
        flops=2 * h * e,
        act=in_act,
        layer=i,
        num_experts=e,
        experts_per_token=k,
    )
    experts = b.add(
        f"{p}.experts",
        "Experts",
        [router, x],
        params=e * spec.expert_params(),
        flops=2 * k * spec.mlp_matmul_weights(f),
        act=k * (ACT_BYTES * h + spec.mlp_activation_bytes(f)),
        layer=i,
        num_experts=e,
        experts_per_token=k,
        ffn_hidden_size=f,
        gated=spec.gated_mlp,
    )
    outputs = [experts]
    if spec.num_shared_experts:
        width = spec.shared_expert_ffn_hidden_size
        gate = h if spec.shared_expert_gate else 0
        shared = _ffn(b, spec, f"{p}.shared", i, x, width, spec.num_shared_experts, 0, gate)
        outputs.append(shared)
    return outputs


def _ffn(
    b: _Builder,
    spec: TransformerCounts,
    p: str,
    i: int,
    x: str,
    f: int,
    n: int,
    in_act: int,
    gate: int = 0,
) -> str:
    """`n` parallel MLPs of width `f` (n > 1 only for shared experts) as fc1 -> act -> fc2;
    `gate`: weights of a shared-expert gate (h -> 1), counted with fc1."""
    h, up = spec.hidden_size, 2 if spec.gated_mlp else 1
    fc2_params = n * (f * h + (h if spec.mlp_bias else 0))
    fc1_params = n * spec.mlp_params(f) - fc2_params
    fc1 = b.add(
        f"{p}.fc1",
        "MatMul",
        [x],
        params=fc1_params + gate,
        flops=2 * (n * up * h * f + gate),
        act=in_act,
        layer=i,
        role="mlp_up",
        in_features=h,
        out_features=n * up * f,
    )
    act = b.add(
        f"{p}.act", "Activation", [fc1], act=n * ACT_BYTES * up * f, layer=i, kind=spec.mlp_kind
    )
    return b.add(
        f"{p}.fc2",
        "MatMul",
        [act],
        params=fc2_params,
        flops=2 * n * f * h,
        act=n * ACT_BYTES * f,
        layer=i,
        role="mlp_down",
        in_features=n * f,
        out_features=h,
    )
