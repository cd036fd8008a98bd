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
Alpa pins; XLA_PYTHON_CLIENT_MEM_FRACTION). A runtime with memory_layout = "alpa-0.2.3" adds the
buffers Alpa 0.2.3's own code allocates beyond this layout (see ALPA_023_LAYOUT: the apply_grad
program's divided gradients, a pipeline stage's received inputs). Within margin_fraction of it the verdict is
"may not fit" with the margin, not a hard yes or no: the layout is a model.

Over 400 lines: the study-era layouts (FSDP's included), Alpa 0.2.3's additions and live's XLA layout
share their per-token counts, so they stay in one module.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from geosim.base.generations import generation
from geosim.inputs.specs import GIB, Model

FITS, MAY_NOT_FIT, OUT_OF_MEMORY = "fits", "may not fit", "out-of-memory"


@dataclass(frozen=True)
class LayoutOptions:
    precision: str = "fp16"  # fp16 | bf16 (mixed, with an fp32 master copy) | fp32
    dropout: bool = False  # Alpa's GPT benchmarks and release tests train with deterministic=True
    remat: bool = False
    workspace_bytes: float = 1.0 * GIB
    usable_fraction: float = 0.9
    margin_fraction: float = 0.10
    architecture: str = ""  # the GPU generation XLA compiles for (its fusions keep different residuals)
    fused_attention: bool = False  # the runtime's attention never writes the scores: none are kept
    # memory_layout = "alpa-0.2.3": Alpa 0.2.3's programs as XLA lays them out (ALPA_023 below), not the
    # study-era layout above
    alpa_023: bool = False

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
    if options.fused_attention:  # flash attention keeps each row's log-sum-exp (fp32) instead of its scores
        scores = model.n_head * 4.0 / e
    h_values = model.block_activation_values / h  # GPT-2's 16 (the shape's own: GQA's narrower k, v; SwiGLU's 3 f)
    values = (replicated_h_values + (h_values - replicated_h_values) / t) * h * e + scores * e / t
    if options.dropout and not options.fused_attention:  # masks of the two residual dropouts and the attention dropout, its output
        values += 2 * h * 1 + scores * (1 + e) / t
    return values


def block_input_bytes_per_token(model: Model, options: LayoutOptions) -> float:
    """What a rematerialized block keeps: its input."""
    return model.n_embd * options.value_bytes


def block_transient_bytes_per_token(model: Model, seq_len: int, options: LayoutOptions, tensor_parallel: int = 1) -> float:
    """A block's backward: the score gradients (dP, dS) and the MLP's gradients (GPT-2: two 4h-wide)."""
    e, t = options.value_bytes, tensor_parallel
    scores = 0.0 if options.fused_attention else 2 * model.n_head * seq_len * e / t
    return scores + model.block_gradient_values * e / t


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


# --- Alpa 0.2.3's own buffers (memory_layout = "alpa-0.2.3") ------------------------------------
#
# Read from Alpa's public code at tag v0.2.3 (github.com/alpa-projects/alpa), for its GPT benchmark's
# TrainState (benchmark/alpa/benchmark_one_case_gpt_bert.py: create_train_state):
# - states, per parameter, fp16 training: the params cast to fp16 (2 B) and an fp32 master copy (4 B),
#   alpa/model/model_util.py TrainState.create(use_master_copy=True); optax.adamw's two moments initialised
#   on the master copy, fp32 (8 B); the gradient accumulators, one per parameter in the gradient's dtype,
#   fp16 (2 B): alpa/shard_parallel/compile_executable.py add_gradient_accumulation clones the gradient
#   vars, and alpa/pipeline_parallel/runtime_emitter.py _compile_grad_buffer_allocations allocates them per
#   stage ("grad acc"). The same 16 B/param as the study-era layout (state_bytes).
# - apply_grad: compile_executable.py compiles accumulate_grad and apply_grad as two programs and donates
#   the old gradients to accumulate_grad only ("donated_invars + (False,) * num_grads" for apply_grad): the
#   gradients divided by num_micro_batches are a new buffer beside the accumulators while the update runs
#   (TrainState.apply_gradients' `x + 0.0 * y` keeps the fp16 params' donation in place). One more
#   gradient's worth, after the activations are gone: it is the peak only where the activations are small.
# - a pipeline stage: each microbatch's input received from the stage before (cross_mesh_resharding.py)
#   is kept until its backward has run (added). Its forward and backward are separate XLA programs
#   (computation.py splits the jaxpr at the pipeline markers), so JAX's residual list crosses between them;
#   counted as live's differentiated scan keeps it (JAX_SCANNED_*), gpt2m's one-VM Pipeshard (two one-GPU
#   stages, 4 microbatches of 8) would need 26.4 GiB of the RTX 6000's 21.6 usable, yet the study ran it
#   (12.17 TFLOP/s a GPU, single_vm_gpt2m): the stage programs keep fewer, so the count stays the fused one.
# - the allocator: alpa/global_env.py preallocates XLA_PYTHON_CLIENT_MEM_FRACTION = 0.9 of the GPU (the
#   usable fraction, [memory] usable_fraction). Alpa's benchmark reports max(the allocator's peak, the
#   executable's total_allocation_size) (benchmark/alpa/benchmark_parallel_utils.py): the compile-time
#   figure counts an executable's arguments and temporaries, not the states it does not read, so it is
#   below the allocator's peak for these steps.
ALPA_023_LAYOUT = "alpa-0.2.3"


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
    if options.alpa_023:
        # apply_grad, once the activations are gone: the gradients divided by the microbatches are a new
        # buffer beside the accumulators (Alpa does not donate the gradients to apply_grad)
        apply = parts["gradients"]  # one more gradient's worth, in the gradients' precision
        turn = parts["activations"] + parts["transient"]
        parts["transient"] += max(0.0, apply - turn)
    return parts


def data_parallel(model: Model, sequences_per_gpu: float, seq_len: int, options: LayoutOptions,
                  params_held: float | None = None) -> dict[str, float]:
    """A full replica (or `params_held`: expert parallelism's share of the experts); each weight's gradient is
    added into the accumulator as its GEMM produces it."""
    acts = activations(model, sequences_per_gpu, seq_len, model.n_layer, True, options)
    return _layout(model.num_params if params_held is None else params_held, 0.0, 1, (), acts, 1, options)


def zero2(model: Model, sequences_per_gpu: float, seq_len: int, gpus: int, options: LayoutOptions) -> dict[str, float]:
    """Alpa's Zero2Parallel: 16-bit weights whole; master weights, the gradient accumulator and Adam's
    moments sharded; each microbatch's whole 16-bit gradient lives until it is reduce-scattered."""
    acts = activations(model, sequences_per_gpu, seq_len, model.n_layer, True, options)
    whole_gradient = model.num_params * state_bytes(options).gradients
    return _layout(0.0, model.num_params, gpus, ("master", "gradients", "optimizer"), acts, 1, options,
                   gradient_transient=whole_gradient)


def fsdp(model: Model, sequences_per_gpu: float, seq_len: int, gpus: int, unit_params: float, root_params: float,
         options: LayoutOptions, reduce_bytes: float, units_in_flight: int = 2, reshard: bool = True) -> dict[str, float]:
    """FSDP / ZeRO-3 (geosim/techniques/fsdp.py) over a shard group of `gpus`: every part of the model state
    sharded (the 16-bit parameters, the fp32 master, the gradient shard in the reduction's precision,
    Adam's moments); gathered whole: the root unit (embedding and tied head, kept for the step) and
    `units_in_flight` units (the one computing and the one prefetched), or every unit where they are not
    resharded after the forward; the whole gradients of the units in flight: the one being reduce-scattered
    in the training precision and its copy in the reduction's (where that differs), the others' in the
    training precision (the next unit's backward writes its own while the last one's is reduced)."""
    sb = state_bytes(options)
    acts = activations(model, sequences_per_gpu, seq_len, model.n_layer, True, options)
    shard = model.num_params / gpus
    e = options.value_bytes
    gathered = model.num_params if not reshard else root_params + min(units_in_flight, model.n_layer) * unit_params
    reduced = unit_params * (e + (reduce_bytes if reduce_bytes != e else 0.0))
    unit_gradients = reduced + (units_in_flight - 1) * unit_params * e
    return {"weights": shard * sb.weights, "master": shard * sb.master, "gradients": shard * reduce_bytes,
            "optimizer": shard * sb.optimizer, "gathered": gathered * e, "activations": acts.residual,
            "transient": acts.transient + unit_gradients, "workspace": options.workspace_bytes}


SHARDED_STATE = ("weights", "master", "gradients", "optimizer")  # FSDP's shards (fsdp's parts)


def part_groups(parts: dict[str, float]) -> dict[str, float]:
    """A layout's parts summed as a sharded one is read: shards of the model state, the units gathered
    whole, activations (residuals and the backward's transients), workspace."""
    return {"shards": sum(parts.get(k, 0.0) for k in SHARDED_STATE), "gathered units": parts.get("gathered", 0.0),
            "activations": parts.get("activations", 0.0) + parts.get("transient", 0.0),
            "workspace": parts.get("workspace", 0.0)}


def auto_sharded_params(model: Model, gpus: int) -> float:
    """Parameters one GPU holds under auto_sharded: the blocks' matrices split, the rest whole."""
    matrices = model.n_layer * model.layer_matrix_params
    return model.num_params - matrices + matrices / gpus


def auto_sharded(model: Model, sequences: float, seq_len: int, gpus: int, options: LayoutOptions) -> dict[str, float]:
    """Alpa's ShardParallel as its ILP lays a GPT block out: the four weight matrices of every block
    split over the GPUs (Megatron's column/row split), but the embedding tables, biases and layer
    norms replicated (Alpa's solver has no split strategy for the embedding gather that beats
    replicating it at these sizes), so every GPU holds their states whole; the activations that
    feed the layer norms are replicated, the attention and MLP ones split by heads and columns.
    `sequences` is the whole microbatch: every GPU sees every token."""
    matrices = model.n_layer * model.layer_matrix_params
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
    matrices = layers * model.layer_matrix_params
    params = model.stage_params(layers, first, last)
    if last and not first:
        params += model.norm_params  # the final norm before the head
    acts = activations(model, sequences_per_gpu, seq_len, layers, last, options, tensor_parallel=tensor_parallel)
    parts = _layout(params - matrices, matrices, tensor_parallel, ("weights", "master", "gradients", "optimizer"),
                    acts, in_flight, options)
    if options.alpa_023 and not first:
        # each microbatch's input, received from the stage before, is kept until its backward has run
        parts["activations"] += in_flight * sequences_per_gpu * seq_len * model.n_embd * options.value_bytes
    return parts


# --- live's program: Flax GPT-2 and optax AdamW as `geosim live` compiles them ---------------------
#
# The same parts, laid out as XLA lays out live's step (live/train/model.py, live/train/techniques/),
# counted from its ops and checked against XLA's own buffer assignment of that step
# (bench/bench_memory.py; docs/results/2026-11-25-memory-xla.md). Where it differs from Alpa's:
# - the weights stay fp32 whatever the precision (no 16-bit copy, no master): 4 B/param, Adam 8;
# - the gradients (fp32) are born in the backward as the residuals die, so they share the
#   activations' memory: the step's temporaries are the larger of the forward/backward turn and
#   the update (the gradients and their flat copy for the one all-reduce; Adam writes into the
#   donated state);
# - the turn holds every block's residuals, the loss's logits twice in fp32 (the head casts to
#   fp32: the logits and their softmax), and the tied embedding's gradient, which the head's
#   backward makes first;
# - the GELU is the tanh form: its backward keeps the tanh (4h) besides its input and output;
# - live's pipeline runs its blocks in a differentiated scan: JAX's own residual list per block, stacked
#   over the ticks and kept whole through the backward loop (JAX_SCANNED_*; LivePlacement.scanned);
# - remat keeps a block's input, split over a tensor-parallel group outside a scan; two microbatches
#   (live's one-step scan, unrolled) run both forwards before either backward.

# Per token and block, live keeps the shape's block_activation_values (GPT-2: ln_1 in/out, q, k, v, attention out,
# ln_2 in/out, fc out and GELU's out, 16h) and one more MLP-wide value: GELU's tanh (4h; 20h in all), SwiGLU's sigmoid
JAX_EXTRA_MLP_VALUES = 1.0
JAX_REPLICATED_H_VALUES = 2.0  # under tensor parallelism: the residual stream entering each layer norm
JAX_SCORE_FP32_VALUES = 2.0  # per score: the fp32 scores and the fp32 softmax (live's softmax runs in fp32)
# In 16-bit, per score: the fp32 softmax and its 16-bit cast (XLA for sm_80, the grid above); a generation whose
# XLA fusions keep otherwise says so (geosim/data/generations.toml, jax_score_16bit_values: Hopper's two 16-bit
# values a score, measured on an H200)
JAX_LOGIT_VALUES = 2.0  # per vocabulary entry, fp32: the logits and their softmax (the loss's gradient)
JAX_UPDATE_COPIES = 2.0  # at the update, per parameter held: the gradient and its flat copy for the one reduction (fp32)


# A block inside a scan that is differentiated from outside it (live's pipeline: a scan over ticks around a
# scan over the stage's layers) keeps JAX's own residual list: the forward loop writes every residual
# JAX's linearization names into a stacked loop output, and XLA cannot rebuild the cheap elementwise ones
# in the backward's fusions across the loop boundary as it does in straight-line code. Per token and block
# (read off the scan's outputs in XLA's buffer assignment, and jax.ad_checkpoint.print_saved_residuals):
JAX_SCANNED_LN_FP32_H_VALUES = 6.0  # each layer norm in fp32 (Flax upcasts): x squared, x - mean, the normalized x
JAX_SCANNED_LN_OUT_H_VALUES = 2.0  # each layer norm's output in the compute dtype
JAX_SCANNED_SPLIT_H_VALUES = 28.0  # q, k, v, the merged attention output (h each); the MLP's fc output and
#                                    the tanh-GELU's five intermediates (4h each): split over a tensor-parallel group


def jax_block_bytes_per_token(model: Model, seq_len: int, options: LayoutOptions, tensor_parallel: int = 1,
                              scanned: bool = False) -> float:
    """One block's residuals per token in live's step (see above), on one GPU of a tensor-parallel group;
    `scanned`: the block runs inside a differentiated scan and keeps JAX's own residual list."""
    e, t, h = options.value_bytes, tensor_parallel, model.n_embd
    facts = generation(options.architecture)
    two_values = facts.jax_score_16bit_values if facts is not None else None
    per_score = (JAX_SCORE_FP32_VALUES * 4.0 if options.precision == "fp32"
                 else two_values * e if two_values else 4.0 + e)  # 16-bit: the fp32 softmax and its 16-bit cast
    scores = model.n_head * seq_len / t * per_score
    if scanned:
        replicated_bytes = JAX_SCANNED_LN_FP32_H_VALUES * 4.0 + JAX_SCANNED_LN_OUT_H_VALUES * e
        return (replicated_bytes + JAX_SCANNED_SPLIT_H_VALUES * e / t) * h + scores
    replicated = JAX_REPLICATED_H_VALUES
    block = (model.block_activation_values + JAX_EXTRA_MLP_VALUES * model.ffn) / h  # GPT-2: 20
    h_values = (replicated + (block - replicated) / t) * h * e
    return h_values + scores


def jax_activations(model: Model, sequences: float, seq_len: int, layers: int, options: LayoutOptions,
                    tensor_parallel: int = 1, scanned: bool = False) -> tuple[float, float]:
    """(kept, rebuilt) bytes of one microbatch of `sequences` through `layers` blocks: the residuals kept
    for the backward, and under remat, besides the block inputs kept, the one block rebuilt at a time."""
    tokens = sequences * seq_len
    if options.remat and layers:
        # a block's saved input is the residual stream, which the SPMD partitioner keeps split over a tensor-
        # parallel group between blocks (reduce-scatter after the row-parallel matmul, all-gather before the
        # layer norm), so each device keeps 1/t of it; a scan's stacked carry stays whole (the pipeline).
        # The block rebuilt in the backward runs straight-line (inside the loop body under a scan).
        split = 1 if scanned else tensor_parallel
        return (tokens * layers * model.n_embd * options.value_bytes / split,
                tokens * jax_block_bytes_per_token(model, seq_len, options, tensor_parallel))
    return tokens * layers * jax_block_bytes_per_token(model, seq_len, options, tensor_parallel, scanned), 0.0


def jax_head_bytes(model: Model, sequences: float, seq_len: int, options: LayoutOptions, copies: float = 1.0,
                   tensor_parallel: int = 1) -> float:
    """The loss at the turn: the logits and their softmax in fp32 for every token, the final layer norm's
    input and output (`copies` sets of them), and the tied embedding's gradient (fp32, split as the
    embedding is)."""
    tokens = sequences * seq_len
    return (copies * tokens * (JAX_LOGIT_VALUES * model.vocab * 4.0 + 2 * model.n_embd * options.value_bytes)
            + model.vocab * model.n_embd * 4.0 / tensor_parallel)


@dataclass(frozen=True)
class LivePlacement:
    """How one of live's techniques places a step on a device (each live technique module says it:
    live/train/techniques/<name>.py, placement())."""

    rows: float  # sequences of one microbatch that this device computes
    layers: float  # blocks it runs
    params_held: float  # parameters whose fp32 weights and Adam moments it holds
    grads_held: float  # parameters whose gradient sum it keeps (ZeRO-2: its flat shard)
    microbatch_grads: float  # parameters whose whole gradient a microbatch's backward makes on it
    in_flight: float  # microbatches' block residuals held at the turn
    tensor_parallel: int = 1
    head_rows: float | None = None  # sequences whose logits it holds at once (default: rows)
    extra_state_bytes: float = 0.0  # e.g. DiLoCo's outer parameters and momentum
    optimizer_held: float | None = None  # parameters whose Adam moments it holds (default: params_held)
    tree_accumulator: bool = True  # the gradient sum is shaped like the parameters (not a flat shard)
    accumulates: bool = True  # microbatches are summed in a carried gradient (not a pipeline's schedule)
    heads_in_flight: float = 1  # microbatches whose logits are held at once
    # the blocks run inside a scan differentiated from outside (live's pipeline: `in_flight` is then its
    # ticks): each block keeps JAX's own residual list (JAX_SCANNED_*), stacked over the ticks, and the
    # backward loop copies one tick's slice out of the stack beside it
    scanned: bool = False
    head_gathers_embedding: bool = False  # the tied head all-gathers the whole fp32 embedding (not split)


def live_step(model: Model, placement: LivePlacement, seq_len: int, microbatches: int,
              options: LayoutOptions) -> dict[str, float]:
    """Bytes one device holds at the peak of live's training step, by part (see above)."""
    pl, mb = placement, max(microbatches, 1)
    tensor = pl.tensor_parallel
    optimizer_held = pl.params_held if pl.optimizer_held is None else pl.optimizer_held
    parts = {"weights": 4.0 * pl.params_held, "master": 0.0, "optimizer": 8.0 * optimizer_held + pl.extra_state_bytes}
    in_flight, accumulator = pl.in_flight, 0.0
    if options.remat and pl.accumulates and mb > 1 and in_flight == 1:
        # remat: the turn is the head's (the blocks keep only their inputs, a block is rebuilt only once
        # the logits are gone); when the loop runs the microbatches one at a time, beside the fp32 gradient
        # sum carried from the earlier ones (the head's embedding gradient is added into that sum in place
        # where it is a tree like the parameters, not ZeRO-2's flat shard). Two microbatches (the unrolled
        # one-step scan, in_flight 2) run both forwards before either backward: no gradient exists yet at
        # their turn, and both keep their block inputs.
        accumulator = 4.0 * pl.grads_held
    kept, rebuilt = jax_activations(model, pl.rows, seq_len, pl.layers, options, tensor, pl.scanned)
    embedding_split = 1 if pl.head_gathers_embedding else tensor
    turn = in_flight * kept
    head = jax_head_bytes(model, pl.rows if pl.head_rows is None else pl.head_rows, seq_len, options,
                          min(in_flight, pl.heads_in_flight), embedding_split)
    if accumulator and pl.tree_accumulator:
        head -= model.vocab * model.n_embd * 4.0 / embedding_split
    if pl.scanned:
        # the backward's loop body, once the logits are gone (the stack is not: XLA frees the stacked loop
        # output only after the loop): one tick's slice copied out of the stack, under remat the rebuilt
        # block, one block's backward buffers (score gradients, the MLP's 4h-wide gradients) and the
        # stage's weight gradients carried over the ticks (fp32)
        block_backward = pl.rows * seq_len * block_transient_bytes_per_token(model, seq_len, options, tensor)
        head = max(head, kept + rebuilt + block_backward + 4.0 * pl.microbatch_grads)
    elif not pl.accumulates:
        turn += rebuilt  # remat: a block is rebuilt once the logits are gone
    # the update: a microbatch's whole gradient (fp32) and its flat copy for the one reduction, beside
    # a flat shard's carried sum (ZeRO-2 scatters every microbatch's whole gradient into it)
    update = JAX_UPDATE_COPIES * 4.0 * pl.microbatch_grads + (0.0 if pl.tree_accumulator else 4.0 * pl.grads_held)
    parts["activations"] = turn
    parts["transient"] = head
    parts["gradients"] = max(accumulator, update - turn - head)  # the carried sum, or what the update needs beyond
    parts["workspace"] = options.workspace_bytes
    return parts


# --- verdict --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    status: str  # fits | may not fit | out-of-memory
    need_bytes: float
    usable_bytes: float
    margin_fraction: float = 0.10  # the model's error band (its spread against XLA's buffer assignment)

    @property
    def margin_bytes(self) -> float:
        return self.usable_bytes - self.need_bytes

    @property
    def word(self) -> str:
        """The band in words, the same in every command: fits, may not fit, does not fit."""
        return {FITS: "fits", MAY_NOT_FIT: "may not fit"}.get(self.status, "does not fit")

    def describe(self) -> str:
        needs = f"needs {self.need_bytes / GIB:.1f} of {self.usable_bytes / GIB:.1f} GiB usable"
        if self.status == MAY_NOT_FIT:
            return f"may not fit: {needs}, within the model's {self.margin_fraction:.0%} error"
        return f"{self.word}: {needs}"


def verdict(need_bytes: float, memory_gib: float, options: LayoutOptions) -> Verdict:
    usable = memory_gib * GIB * options.usable_fraction
    band = options.margin_fraction * usable
    if need_bytes <= usable - band:
        status = FITS
    elif need_bytes <= usable + band:
        status = MAY_NOT_FIT
    else:
        status = OUT_OF_MEMORY
    return Verdict(status, need_bytes, usable, options.margin_fraction)


def options_for(workload, params, runtime=None) -> LayoutOptions:
    """The layout options of a case: its precision and checkpointing, the parameters' workspace and margins,
    and whether the runtime lays its memory out as Alpa 0.2.3 does (memory_layout = "alpa-0.2.3")."""
    return LayoutOptions(precision=workload.precision, remat=workload.checkpointing,
                         workspace_bytes=params.workspace_bytes, usable_fraction=params.usable_memory_fraction,
                         margin_fraction=params.memory_margin_fraction, fused_attention=params.fused_attention,
                         alpa_023=runtime is not None and runtime.memory_layout == ALPA_023_LAYOUT)


def per_device(devices, model: Model, workload, params, runtime, alpa_layout, jax_placement) -> dict[int, dict]:
    """Bytes by part for each device (rank -> parts), as the workload's runtime lays the step out: Alpa's
    TrainState (alpa_layout(options)), or live's JAX step (runtime memory_layout = "jax": the technique's
    jax_placement() through live_step, per GPU generation, without a workspace: XLA's temporaries hold
    cuBLAS's, and a GPU's allocator peak is XLA's buffer assignment)."""
    options = options_for(workload, params, runtime)
    if runtime.memory_layout != "jax":
        layout = alpa_layout(options)
        return {d.rank: dict(layout) for d in devices}
    placement = jax_placement()
    by_generation: dict[str, dict] = {}
    out = {}
    for d in devices:
        generation = d.gpu.architecture
        if generation not in by_generation:
            by_generation[generation] = live_step(model, placement, workload.seq_len, workload.microbatches,
                                                  replace(options, workspace_bytes=0.0, architecture=generation))
        out[d.rank] = dict(by_generation[generation])
    return out
