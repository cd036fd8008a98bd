"""Peak memory of one GPU as Alpa and XLA lay a GPT-2 training step out, per technique.

What a GPU holds at its peak (the turn from the last forward to the first backward):

- model states, by how the technique places them. Mixed precision as Alpa trains it
  (TrainState with a master copy): 16-bit weights (2 B/param), fp32 master weights (4),
  16-bit gradients (2) and Adam's two fp32 moments (8); fp32 training: weights 4,
  gradients 4, moments 8 and no master copy.
- residuals: what JAX's autodiff saves for the backward (XLA frees every other forward
  temporary, so this is the activation memory), for every microbatch still in flight.
  Per token and block, in activation values: the inputs of both layer norms and their
  outputs (4), q, k and v (3), the merged attention output (1), the MLP's 4h pre-GELU and
  post-GELU activations (8), i.e. 16 h-wide values, plus the softmax output (a*S values).
  Dropout adds one-byte masks (two h-wide, one a*S) and the dropped probabilities (a*S
  values). With remat (Alpa's remat_layer / activation checkpointing) only each block's
  input survives and one block's residuals are rebuilt at a time.
- transients: the largest buffers the backward allocates while the residuals are still
  alive: the score gradients of one block (dP and dS, 2 a*S values per token), the LM
  head's log-probabilities gradient, the 16-bit gradient of a microbatch before it is
  reduced (ZeRO-2, Data) into the accumulator.
- workspace: cuBLAS/XLA scratch (params: memory.workspace_gib).

A GPU's usable memory is the fraction JAX's allocator preallocates (0.9 in the jaxlib
Alpa pins; XLA_PYTHON_CLIENT_MEM_FRACTION). Within margin_fraction of it the verdict is
"may not fit" with the margin, not a hard yes or no: the layout is a model.
"""

from __future__ import annotations

from dataclasses import dataclass

from geosim.specs import GIB, Model

FITS, MAY_NOT_FIT, OUT_OF_MEMORY = "fits", "may not fit", "out-of-memory"


@dataclass(frozen=True)
class LayoutOptions:
    precision: str = "fp16"  # fp16 | bf16 (mixed, with an fp32 master copy) | fp32
    dropout: bool = False  # Alpa's GPT benchmarks and release tests train with deterministic=True
    remat: bool = False
    workspace_bytes: float = 1.0 * GIB
    usable_fraction: float = 0.9
    margin_fraction: float = 0.10

    @property
    def value_bytes(self) -> int:
        return 4 if self.precision == "fp32" else 2

    @property
    def mixed(self) -> bool:
        return self.precision != "fp32"


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of each part of the model state."""

    weights: float
    master: float
    gradients: float
    optimizer: float


def state_bytes(options: LayoutOptions) -> StateBytes:
    if options.mixed:
        return StateBytes(weights=2.0, master=4.0, gradients=2.0, optimizer=8.0)
    return StateBytes(weights=4.0, master=0.0, gradients=4.0, optimizer=8.0)


# --- residuals, per token ---------------------------------------------------------------------

def block_residual_bytes_per_token(model: Model, seq_len: int, options: LayoutOptions,
                                   tensor_parallel: int = 1, replicated_h_values: float = 4.0) -> float:
    """Bytes one block saves for its backward, per token, on one GPU of a tensor-parallel group:
    `replicated_h_values` of the 16 h-wide values are held whole by every GPU (the layer norms'
    inputs and outputs), the rest and the attention's a*S values are split over the group."""
    e, t, h = options.value_bytes, tensor_parallel, model.n_embd
    scores = model.n_head * seq_len  # softmax values per token
    values = (replicated_h_values + (16.0 - replicated_h_values) / t) * h * e + scores * e / t
    if options.dropout:  # masks of the two residual dropouts and the attention dropout, its output
        values += 2 * h * 1 + scores * (1 + e) / t
    return values


def block_input_bytes_per_token(model: Model, options: LayoutOptions) -> float:
    """What a rematerialized block keeps: its input."""
    return model.n_embd * options.value_bytes


def block_transient_bytes_per_token(model: Model, seq_len: int, options: LayoutOptions, tensor_parallel: int = 1) -> float:
    """A block's backward: the score gradients (dP, dS) and the MLP's 4h-wide gradients."""
    e, t = options.value_bytes, tensor_parallel
    return 2 * model.n_head * seq_len * e / t + 8 * model.n_embd * e / t


def head_bytes_per_token(model: Model, options: LayoutOptions, tensor_parallel: int = 1) -> tuple[float, float]:
    """(residual, transient) of the LM head and loss: the final layer norm's input and output and
    the log-probabilities over the vocabulary; their gradient in the backward."""
    e = options.value_bytes
    vocab = model.vocab / tensor_parallel
    return 2 * model.n_embd * e + vocab * e, vocab * e


@dataclass(frozen=True)
class Activations:
    residual: float  # bytes kept for the backward by one microbatch
    transient: float  # largest backward buffer on top of them


def activations(model: Model, sequences: float, seq_len: int, layers: int, head: bool, options: LayoutOptions,
                tensor_parallel: int = 1, replicated_h_values: float = 4.0) -> Activations:
    """One microbatch of `sequences` sequences through `layers` blocks (and the head) on one GPU."""
    tokens = sequences * seq_len
    block = block_residual_bytes_per_token(model, seq_len, options, tensor_parallel, replicated_h_values)
    if options.remat and layers:
        residual = tokens * (layers * block_input_bytes_per_token(model, options))
        transient = tokens * block  # one block rebuilt at a time
    else:
        residual = tokens * layers * block
        transient = 0.0
    transient += tokens * (block_transient_bytes_per_token(model, seq_len, options, tensor_parallel) if layers else 0.0)
    if head:
        head_residual, head_transient = head_bytes_per_token(model, options, tensor_parallel)
        residual += tokens * head_residual
        transient = max(transient, tokens * head_transient)
    return Activations(residual, transient)


# --- per technique ------------------------------------------------------------------------

def _layout(params_full: float, params_sharded: float, shards: int, what_is_sharded: tuple[str, ...],
            acts: Activations, in_flight: int, options: LayoutOptions, gradient_transient: float = 0.0) -> dict[str, float]:
    """Bytes by part. params_full are held whole; params_sharded are split 1/shards for the parts
    named in what_is_sharded (weights, master, gradients, optimizer)."""
    sb = state_bytes(options)
    parts = {}
    for part in ("weights", "master", "gradients", "optimizer"):
        per_param = getattr(sb, part)
        held = params_full + (params_sharded / shards if part in what_is_sharded else params_sharded)
        parts[part] = held * per_param
    parts["activations"] = acts.residual * in_flight
    parts["transient"] = acts.transient + gradient_transient
    parts["workspace"] = options.workspace_bytes
    return parts


def data_parallel(model: Model, sequences_per_gpu: float, seq_len: int, options: LayoutOptions) -> dict[str, float]:
    """A full replica; each weight's gradient is added into the accumulator as its GEMM produces it."""
    acts = activations(model, sequences_per_gpu, seq_len, model.n_layer, True, options)
    return _layout(model.num_params, 0.0, 1, (), acts, 1, options)


def zero2(model: Model, sequences_per_gpu: float, seq_len: int, gpus: int, options: LayoutOptions) -> dict[str, float]:
    """Alpa's Zero2Parallel: 16-bit weights whole; master weights, the gradient accumulator and Adam's
    moments sharded; each microbatch's whole 16-bit gradient lives until it is reduce-scattered."""
    acts = activations(model, sequences_per_gpu, seq_len, model.n_layer, True, options)
    whole_gradient = model.num_params * state_bytes(options).gradients
    return _layout(0.0, model.num_params, gpus, ("master", "gradients", "optimizer"), acts, 1, options,
                   gradient_transient=whole_gradient)


def auto_sharded_params(model: Model, gpus: int) -> float:
    """Parameters one GPU holds under auto_sharded: the blocks' matrices split, the rest whole."""
    matrices = model.n_layer * 12 * model.n_embd ** 2
    return model.num_params - matrices + matrices / gpus


def auto_sharded(model: Model, sequences: float, seq_len: int, gpus: int, options: LayoutOptions) -> dict[str, float]:
    """Alpa's ShardParallel as its ILP lays a GPT block out: the four weight matrices of every block
    split over the GPUs (Megatron's column/row split), but the embedding tables, biases and layer
    norms replicated (Alpa's solver has no split strategy for the embedding gather that beats
    replicating it at these sizes), so every GPU holds their states whole; the activations that
    feed the layer norms are replicated, the attention and MLP ones split by heads and columns.
    `sequences` is the whole microbatch: every GPU sees every token."""
    matrices = model.n_layer * 12 * model.n_embd ** 2
    replicated = model.num_params - matrices
    acts = activations(model, sequences, seq_len, model.n_layer, True, options, tensor_parallel=gpus)
    return _layout(replicated, matrices, gpus, ("weights", "master", "gradients", "optimizer"), acts, 1, options)


def pipeline_stage(model: Model, sequences_per_gpu: float, seq_len: int, layers: int, first: bool, last: bool,
                   stages: int, in_flight: int, options: LayoutOptions, tensor_parallel: int = 1) -> dict[str, float]:
    """One GPU of a pipeline stage (Alpa's PipeshardParallel with one GPU or a mesh per stage): the
    stage's blocks, the embedding on the first stage, the tied LM head's copy of the token embedding
    on the last (when it is not also the first), and `in_flight` microbatches' residuals (1F1B:
    stages - stage index; GPipe: all of them). A mesh running data parallel inside holds the stage
    whole; one sharding it (tensor_parallel > 1) splits the blocks' matrices as auto_sharded does,
    and each of its GPUs sees the whole microbatch."""
    matrices = layers * 12 * model.n_embd ** 2
    params = layers * model.params_per_layer + (model.embedding_params if first else 0)
    if last and not first:
        params += model.vocab * model.n_embd + 2 * model.n_embd
    acts = activations(model, sequences_per_gpu, seq_len, layers, last, options, tensor_parallel=tensor_parallel)
    return _layout(params - matrices, matrices, tensor_parallel, ("weights", "master", "gradients", "optimizer"),
                   acts, in_flight, options)


# --- verdict --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    status: str  # fits | may not fit | out-of-memory
    need_bytes: float
    usable_bytes: float

    @property
    def margin_bytes(self) -> float:
        return self.usable_bytes - self.need_bytes

    def describe(self) -> str:
        margin = self.margin_bytes / GIB
        if self.status == FITS:
            return f"fits ({margin:.1f} GiB to spare of {self.usable_bytes / GIB:.1f} usable)"
        if self.status == MAY_NOT_FIT:
            side = "spare" if margin >= 0 else "short"
            return (f"may not fit: {abs(margin):.1f} GiB {side} of {self.usable_bytes / GIB:.1f} usable, "
                    f"within the model's 10% margin")
        return f"out of memory: needs {self.need_bytes / GIB:.1f} GiB of {self.usable_bytes / GIB:.1f} usable"


def verdict(need_bytes: float, memory_gib: float, options: LayoutOptions) -> Verdict:
    usable = memory_gib * GIB * options.usable_fraction
    band = options.margin_fraction * usable
    if need_bytes <= usable - band:
        status = FITS
    elif need_bytes <= usable + band:
        status = MAY_NOT_FIT
    else:
        status = OUT_OF_MEMORY
    return Verdict(status, need_bytes, usable)


def options_for(workload, params) -> LayoutOptions:
    """The layout options of a case: its precision and checkpointing, the parameters' workspace and margins."""
    return LayoutOptions(precision=workload.precision, remat=workload.checkpointing,
                         workspace_bytes=params.workspace_bytes, usable_fraction=params.usable_memory_fraction,
                         margin_fraction=params.memory_margin_fraction)
