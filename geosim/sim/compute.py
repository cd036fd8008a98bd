"""How long a GPU takes to compute a piece of a GPT-2 training step, from its datasheet.

An op-level roofline in the manner of Calculon (Isaev et al., SC'23): a transformer block's
forward and backward are listed as the kernels XLA runs for them (Flax's GPT-2, as Alpa
trains it), each either

- a matrix multiply (M x N x K, possibly batched): its FLOPs at the GPU's tensor peak for
  the precision x an attainable fraction for large GEMMs (one per architecture generation)
  x a size-dependent saturation, or its bytes at the memory bandwidth, whichever is longer
  (small or skinny GEMMs are memory-bound or cannot fill the GPU), or
- a memory-bound kernel (layer norm, bias + GELU, softmax, dropout, residual adds, the
  fp32 <-> fp16 casts, gradient accumulation, Adam's update): its bytes at the attainable
  fraction of the memory bandwidth, or
- fused (flash) attention, where the runtime runs it: its FLOPs at the kernel's own fraction of
  the tensor peak for its generation, head dimension and sequence length (geosim/sim/attention.py),

each paying a kernel's launch gap. The speed of one GPU relative to another then follows
from the catalog (tensor TFLOP/s and memory bandwidth) alone; the few global constants
in ComputeConstants are what calibration may fit, with priors (docs/reference/params.md).

Times are computed once per (Work, GPU) and cached: a Work is a small hashable tuple, so
the engine's millions of Compute ops cost one dictionary look-up each.

Over 400 lines: the kernel list of a step (block, head, embedding, update) is one piece; the
attention kernels' own efficiency is in attention.py.
"""

from __future__ import annotations

from typing import NamedTuple

from geosim.sim.attention import flash_fraction
from geosim.inputs.specs import GPU, ComputeConstants, Model


class Gemm(NamedTuple):
    """C[M,N] = A[M,K] @ B[K,N], `batch` independent ones (attention's per-head products)."""

    label: str
    m: float
    n: float
    k: float
    batch: float = 1.0

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.batch

    def bytes(self, value_bytes: int) -> float:
        return (self.m * self.k + self.k * self.n + self.m * self.n) * self.batch * value_bytes


class MemoryOp(NamedTuple):
    """A memory-bound kernel: the bytes it reads and writes."""

    label: str
    nbytes: float


class FusedAttention(NamedTuple):
    """Attention as one fused kernel (flash attention, PyTorch's SDPA): the score and value products on
    the tensor cores, streaming q, k, v and the output, never writing the S x S scores. It runs at its
    own fraction of the tensor peak, by head dimension and sequence length (geosim/sim/attention.py)."""

    label: str
    flops: float
    nbytes: float
    head_dim: float = 64.0
    seq_len: float = 1024.0
    backward: bool = False


KernelOp = Gemm | MemoryOp | FusedAttention


def architecture(gpu: GPU) -> str:
    """The GPU's architecture generation, lower case (a name of geosim/data/generations.toml), from the catalog."""
    return gpu.architecture


def value_bytes(precision: str) -> int:
    return 4 if precision == "fp32" else 2


def sustained_tensor_tflops(gpu: GPU, precision: str, tf32: bool = False) -> float:
    """The datasheet peak for the precision, capped by board power for tensor precisions: a card cannot
    sustain more tensor TFLOP/s per watt than its generation's least power-dense card of the built-in
    catalog (whose datasheet peak is taken as sustainable). The T4's 65 TFLOP/s in 70 W is capped at
    70 W x the RTX 6000's 130.5 / 295 TFLOP/s per W = 31 TFLOP/s: the T4 throttles its clock under
    sustained tensor load. A card of a generation the catalog does not hold, or without tdp_w, is not capped."""
    peak = gpu.peak_tflops(precision, tf32)
    tensor_fp32 = precision == "fp32" and peak != gpu.fp32_tflops
    if (precision == "fp32" and not tensor_fp32) or not gpu.tdp_w:
        return peak
    per_watt = gpu.generation_tflops_per_watt  # set from the catalog by geosim.inputs.scenario
    if per_watt is None:
        return peak
    if tensor_fp32:  # TF32 throttles as the card's 16-bit tensor rate does
        return peak * min(1.0, gpu.tdp_w * per_watt / gpu.fp16_tensor_tflops)
    return min(peak, gpu.tdp_w * per_watt)


def roofline_seconds(flops: float, nbytes: float, gpu: GPU, precision: str, eff: ComputeConstants) -> float:
    """A tensor-core kernel: its FLOPs at the attainable rate or its bytes at the attainable bandwidth,
    whichever is longer, plus the launch gap."""
    rate = sustained_tensor_tflops(gpu, precision, eff.tf32) * 1e12 * eff.gemm_fraction
    bandwidth = gpu.memory_bandwidth_gbs * 1e9 * eff.memory_fraction
    # F / (rate * F / (F + rate * half)) = F / rate + half: saturation is a fixed ramp per kernel
    return max(flops / rate + eff.gemm_half_s, nbytes / bandwidth) + eff.kernel_s


def gemm_seconds(op: Gemm, gpu: GPU, precision: str, eff: ComputeConstants) -> float:
    return roofline_seconds(op.flops, op.bytes(value_bytes(precision)), gpu, precision, eff)


def memory_seconds(op: MemoryOp, gpu: GPU, eff: ComputeConstants) -> float:
    return op.nbytes / (gpu.memory_bandwidth_gbs * 1e9 * eff.memory_fraction) + eff.kernel_s


def fused_attention_seconds(op: FusedAttention, gpu: GPU, precision: str, eff: ComputeConstants) -> float:
    """A flash attention kernel: its FLOPs at the kernel's own fraction of the tensor peak for its head
    dimension and sequence length on this generation (its ramp is in that fraction, so no GEMM ramp), or
    its bytes at the attainable bandwidth, whichever is longer, plus the launch gap. Flash kernels are
    16-bit only: in fp32 a fused runtime (SDPA's memory-efficient kernel) is priced as a GEMM of its FLOPs
    (an estimate: no fp32 table is published)."""
    if precision == "fp32":
        return roofline_seconds(op.flops, op.nbytes, gpu, precision, eff)
    fraction = flash_fraction(gpu.architecture, op.head_dim, op.seq_len, op.backward)
    rate = sustained_tensor_tflops(gpu, precision, eff.tf32) * 1e12 * fraction
    bandwidth = gpu.memory_bandwidth_gbs * 1e9 * eff.memory_fraction
    return max(op.flops / rate, op.nbytes / bandwidth) + eff.kernel_s


def op_seconds(op: KernelOp, gpu: GPU, precision: str, eff: ComputeConstants) -> float:
    if type(op) is Gemm:
        return gemm_seconds(op, gpu, precision, eff)
    if type(op) is FusedAttention:
        return fused_attention_seconds(op, gpu, precision, eff)
    return memory_seconds(op, gpu, eff)


# --- the kernels of one training step ------------------------------------------------------

# Passes over the attention-score tensor (batch x heads x S x S) besides the two products:
# XLA's softmax is a max-reduce, an exp-sum reduce and a normalize (three reads, one write);
# its backward reads P and dP twice (the row sum of dP * P, then dS) and writes dS.
SOFTMAX_PASSES_FORWARD = 4
SOFTMAX_PASSES_BACKWARD = 5


# Fused causal attention skips the score blocks above the diagonal (FlashAttention-2, Dao 2023): half the
# products' FLOPs, and half the time (the FLOPs counted are the work done, as flash attention's own
# benchmarks count them, so its published fractions apply to them as they are); its backward recomputes
# the scores and makes dV, dP, dQ, dK: 5 products to the forward's 2. Unfused attention (XLA's, eager
# PyTorch's) computes every score and masks them: its products are whole, its score passes per head.
FUSED_CAUSAL_FRACTION = 0.5
FUSED_BACKWARD_PRODUCTS = 2.5


def attention_ops(sequences: float, seq_len: int, d: float, heads: float, e: int, dropout: bool,
                  fused: bool, kv_heads: float | None = None) -> list[KernelOp]:
    """The attention core of one block's forward: scores, masked softmax (and dropout), probabilities x
    values, per head; or, fused, one kernel streaming q, k, v and the output, never the S x S scores.
    `heads` query heads of width d; `kv_heads` key/value heads (grouped-query attention; default: heads):
    only the bytes of k and v follow them, the products are per query head either way."""
    kv = heads if kv_heads is None else kv_heads
    s, scores = seq_len, sequences * heads * seq_len * seq_len
    if fused:
        flops = 2 * 2.0 * s * s * d * sequences * heads * FUSED_CAUSAL_FRACTION
        nbytes = (2 * heads + 2 * kv) * sequences * s * d * e  # q and o, k and v
        return [FusedAttention("fused attention", flops, nbytes, d, s)]
    return [Gemm("scores", s, s, d, sequences * heads),
            MemoryOp("mask+softmax", SOFTMAX_PASSES_FORWARD * scores * e),
            *([MemoryOp("attention dropout", scores * (2 * e + 1))] if dropout else []),
            Gemm("probs@v", s, d, s, sequences * heads)]


def block_forward(model: Model, sequences: float, seq_len: int, precision: str, tensor_parallel: int = 1,
                  dropout: bool = True, fused_attention: bool = False) -> list[KernelOp]:
    """One transformer block's forward for `sequences` sequences on one GPU of a `tensor_parallel`
    split (Megatron's layout: heads and MLP columns split, layer norms and residuals replicated).
    The shape's own widths: q and the attention output n_head x head_dim wide, k and v n_kv_head x
    head_dim (GQA), the MLP's intermediate width (SwiGLU: gate and up in one GEMM, then silu x up)."""
    e, t = value_bytes(precision), tensor_parallel
    h, a = model.n_embd, model.n_head
    tokens, d, heads = sequences * seq_len, model.head_width, a / t
    q, qkv = model.q_width, model.q_width + 2 * model.kv_width
    drop = 1 if dropout else 0  # dropout writes a one-byte mask and the scaled values
    return [
        MemoryOp("ln1", 2 * tokens * h * e),
        Gemm("qkv", tokens, qkv / t, h),
        *([MemoryOp("qkv bias", 2 * tokens * qkv / t * e)] if model.bias != "none" else []),
        *attention_ops(sequences, seq_len, d, heads, e, dropout, fused_attention, model.kv_heads / t),
        MemoryOp("merge heads", 2 * tokens * q / t * e),
        Gemm("attention out", tokens, h, q / t),
        MemoryOp("bias+dropout+residual", tokens * h * (3 * e + drop)),
        MemoryOp("ln2", 2 * tokens * h * e),
        *mlp_forward(model, tokens, e, t),
        MemoryOp("bias+dropout+residual", tokens * h * (3 * e + drop)),
    ]


def mlp_forward(model: Model, tokens: float, e: int, t: int) -> list[KernelOp]:
    """The MLP's kernels: GELU's two GEMMs around bias+GELU, SwiGLU's gate-and-up GEMM, silu x up and the
    down GEMM; a mixture of experts' router, its top-k experts (one GEMM each, its share of the routed
    tokens, capacity padding included) and its shared experts."""
    h = model.n_embd
    swiglu = model.mlp == "swiglu"

    def mlp(rows: float, inner: int, batch: float = 1.0, tag: str = "mlp") -> list[KernelOp]:
        # inner: the unsplit width, divided by t in each term as GPT-2's kernels always were (to the bit)
        act = (MemoryOp(f"{tag} silu*up", 3 * rows * inner / t * e * batch) if swiglu
               else MemoryOp(f"{tag} bias+gelu" if tag != "mlp" else "bias+gelu", 2 * rows * inner / t * e * batch))
        return [Gemm(f"{tag} in", rows, (2 if swiglu else 1) * inner / t, h, batch), act,
                Gemm(f"{tag} out", rows, h, inner / t, batch)]

    if not model.moe:
        return mlp(tokens, model.ffn)
    experts, inner = model.n_expert, model.expert_ffn
    ops: list[KernelOp] = [Gemm("router", tokens, experts, h), MemoryOp("router top-k", 2 * tokens * experts * 4)]
    ops += mlp(tokens * model.routed_tokens / experts, inner, experts, "experts")
    if model.n_shared_expert:
        ops += mlp(tokens, model.n_shared_expert * inner, 1.0, "shared experts")
    return ops


def _backward_gemms(op: Gemm) -> list[Gemm]:
    """dA = dC @ B^T (M x K x N) and dB = A^T @ dC (K x N x M)."""
    return [Gemm(op.label + " dgrad", op.m, op.k, op.n, op.batch), Gemm(op.label + " wgrad", op.k, op.n, op.m, op.batch)]


def block_backward(model: Model, sequences: float, seq_len: int, precision: str, tensor_parallel: int = 1,
                   dropout: bool = True, fused_attention: bool = False) -> list[KernelOp]:
    """The block's backward: two GEMMs per forward GEMM, and per memory-bound kernel one that reads
    what it saved and the incoming gradient and writes the outgoing one (plus bias-gradient reduces)."""
    e, t = value_bytes(precision), tensor_parallel
    s, h, a = seq_len, model.n_embd, model.n_head
    tokens, heads = sequences * seq_len, a / t
    scores = sequences * heads * s * s
    q, qkv = model.q_width, model.q_width + 2 * model.kv_width
    drop = 1 if dropout else 0
    ops: list[KernelOp] = []
    for op in reversed(block_forward(model, sequences, seq_len, precision, tensor_parallel, dropout, fused_attention)):
        if type(op) is Gemm:
            ops += _backward_gemms(op)
            continue
        if type(op) is FusedAttention:  # reads q, k, v, o, dO and the row statistics; writes dq, dk, dv
            ops.append(FusedAttention(op.label + " bwd", op.flops * FUSED_BACKWARD_PRODUCTS, op.nbytes * 2,
                                      op.head_dim, op.seq_len, backward=True))
            continue
        label = op.label
        if label == "bias+dropout+residual":  # dropout's grad, the residual's grad add, the bias reduce
            ops.append(MemoryOp(label + " bwd", tokens * h * (4 * e + drop)))
        elif label in ("ln1", "ln2"):  # read x, dy (and the residual branch's grad), write dx
            ops.append(MemoryOp(label + " bwd", 4 * tokens * h * e))
        elif label.endswith("bias+gelu"):  # read x and dy, write dx; the bias reduce rereads dx
            ops.append(MemoryOp(label + " bwd", 2 * op.nbytes))
        elif label.endswith("silu*up"):  # read gate, up and dy; write d(gate) and d(up)
            ops.append(MemoryOp(label + " bwd", op.nbytes * 5 / 3))
        elif label == "router top-k":  # the routing weights' gradient
            ops.append(MemoryOp(label + " bwd", op.nbytes))
        elif label == "qkv bias":
            ops.append(MemoryOp(label + " bwd", tokens * qkv / t * e))
        elif label == "merge heads":
            ops.append(MemoryOp(label + " bwd", 2 * tokens * q / t * e))
        elif label == "mask+softmax":
            ops.append(MemoryOp(label + " bwd", SOFTMAX_PASSES_BACKWARD * scores * e))
        elif label == "attention dropout":
            ops.append(MemoryOp(label + " bwd", scores * (2 * e + 1)))
        else:  # pragma: no cover - every forward kernel has its backward above
            raise ValueError(f"no backward for {label}")
    return ops


def head_forward(model: Model, sequences: float, seq_len: int, precision: str, tensor_parallel: int = 1) -> list[KernelOp]:
    """Final layer norm, the tied LM head (vocabulary split over a tensor-parallel group) and the
    softmax cross-entropy over the vocabulary (two reads of the logits: max, then sum of exp)."""
    e = value_bytes(precision)
    tokens, h, v = sequences * seq_len, model.n_embd, model.vocab / tensor_parallel
    return [MemoryOp("ln_f", 2 * tokens * h * e), Gemm("lm head", tokens, v, h),
            MemoryOp("cross-entropy", 2 * tokens * v * e)]


def head_backward(model: Model, sequences: float, seq_len: int, precision: str, tensor_parallel: int = 1) -> list[KernelOp]:
    e = value_bytes(precision)
    tokens, h, v = sequences * seq_len, model.n_embd, model.vocab / tensor_parallel
    head = Gemm("lm head", tokens, v, h)
    return [MemoryOp("cross-entropy bwd", 2 * tokens * v * e), *_backward_gemms(head),
            MemoryOp("ln_f bwd", 4 * tokens * h * e)]


def embedding_forward(model: Model, sequences: float, seq_len: int, precision: str, dropout: bool = True) -> list[KernelOp]:
    e = value_bytes(precision)
    tokens, h = sequences * seq_len, model.n_embd
    return [MemoryOp("embedding gather+add+dropout", tokens * h * (3 * e + (1 if dropout else 0)))]


def embedding_backward(model: Model, sequences: float, seq_len: int, precision: str) -> list[KernelOp]:
    """The token embedding's gradient: zero a vocabulary x width buffer, scatter-add the tokens' rows."""
    e = value_bytes(precision)
    tokens, h = sequences * seq_len, model.n_embd
    return [MemoryOp("embedding grad", model.vocab * h * e + 2 * tokens * h * e)]


# bytes per parameter: mixed precision casts the fp32 master weights to 16 bits for every
# microbatch (read 4, write 2) and adds the 16-bit gradient into an fp32 accumulator (read 2,
# read 4, write 4); fp32 only accumulates (read 4, read 4, write 4). Adam (optax.adamw) reads
# weight, gradient, m and v and writes weight, m and v in fp32 (28), plus the gradient-norm read.
CAST_AND_ACCUMULATE_BYTES = {"mixed": 6.0 + 10.0, "fp32": 12.0}
ADAM_BYTES = 32.0


def accumulate_ops(params_held: float, precision: str) -> list[KernelOp]:
    """Per microbatch, per GPU: the weight cast and the gradient accumulation for `params_held` parameters."""
    kind = "fp32" if precision == "fp32" else "mixed"
    return [MemoryOp("cast+accumulate", params_held * CAST_AND_ACCUMULATE_BYTES[kind])]


def optimizer_ops(params_updated: float) -> list[KernelOp]:
    """Per iteration, per GPU: Adam's update of the parameters this GPU owns."""
    return [MemoryOp("adam", params_updated * ADAM_BYTES)]


# --- what a Compute op carries ------------------------------------------------------------

class Work(NamedTuple):
    """A Compute op's work, in the terms the op model needs. Hashable, so the time of each
    distinct Work is computed once per GPU type and cached.

    phase: forward | backward (a microbatch through `layers` blocks, or only their attention or
    MLP half, plus the embedding when `embedding`, plus the LM head and loss when `head`), update (per microbatch cast and
    gradient accumulation of `params` parameters) or optimizer (Adam over `params` parameters).
    remat: backward recomputes the forward first (Alpa's remat / activation checkpointing).
    """

    phase: str
    model: Model
    sequences: float = 0.0
    seq_len: int = 0
    layers: int = 0
    head: bool = False
    embedding: bool = False
    tensor_parallel: int = 1
    params: float = 0.0
    remat: bool = False
    dropout: bool = False  # Alpa's GPT benchmarks and release tests train with deterministic=True
    part: str = "block"  # block | attention | mlp: a tensor-parallel block is timed in its two halves
    # this op is that share of the work's time (a GEMM run in chunks, each chunk's transfer under the next:
    # techniques/shard.py's tp_comm_overlap); chunking's own loss of efficiency is not modelled
    share: float = 1.0


def kernels(work: Work, precision: str, fused_attention: bool = False) -> list[KernelOp]:
    m, b, s, t = work.model, work.sequences, work.seq_len, work.tensor_parallel
    if work.phase == "update":
        return accumulate_ops(work.params, precision)
    if work.phase == "optimizer":
        return optimizer_ops(work.params)
    if work.phase not in ("forward", "backward"):
        raise ValueError(f"unknown phase {work.phase!r}")
    block_fwd = block_forward(m, b, s, precision, t, work.dropout, fused_attention)
    block_bwd = block_backward(m, b, s, precision, t, work.dropout, fused_attention)
    if work.part != "block":
        block_fwd, block_bwd = _half(block_fwd, work.part), _half(block_bwd, work.part)
    forward: list[KernelOp] = []
    if work.embedding:
        forward += embedding_forward(m, b, s, precision, work.dropout)
    forward += block_fwd * work.layers
    if work.head:
        forward += head_forward(m, b, s, precision, t)
    if work.phase == "forward":
        return forward
    backward: list[KernelOp] = list(forward) if work.remat else []
    if work.head:
        backward += head_backward(m, b, s, precision, t)
    backward += block_bwd * work.layers
    if work.embedding:
        backward += embedding_backward(m, b, s, precision)
    return backward


def _half(ops: list[KernelOp], part: str) -> list[KernelOp]:
    """The attention half of a block's kernels (layer norm 1 to the first residual add) or the MLP half."""
    if part not in ("attention", "mlp"):
        raise ValueError(f"unknown block part {part!r}")
    backward = ops[0].label.endswith(" bwd")
    # the forward's first residual add closes the attention half; in the backward it opens it
    cut = [i for i, op in enumerate(ops) if op.label.startswith("bias+dropout+residual")]
    split = cut[0] + 1 if not backward else cut[1]
    first, second = ops[:split], ops[split:]
    if backward:
        return second if part == "attention" else first
    return first if part == "attention" else second


def kernel_flops(ops: list[KernelOp]) -> float:
    return sum(op.flops for op in ops if type(op) is not MemoryOp)


class KernelTimer:
    """Seconds of Work on a GPU, cached per (work, GPU, precision)."""

    def __init__(self, constants: ComputeConstants, by_device: tuple[tuple[str, ComputeConstants], ...] = ()):
        self.constants = constants  # the global ones, with the runtime's per-generation entries and choices
        self.by_device = dict(by_device)  # a device's own constants: a runtime measured its speed
        self._cache: dict[tuple, float] = {}
        self._per_gpu: dict[GPU, ComputeConstants] = {}

    def constants_for(self, gpu: GPU) -> ComputeConstants:
        """The constants one GPU runs with: a device's measured ones, else the runtime's efficiency on its
        generation (its entry, or its estimate for a generation it has none for), else the global ones (a
        device that is no GPU of a known generation: a CPU share)."""
        found = self._per_gpu.get(gpu)
        if found is None:
            own = self.by_device.get(gpu.name)
            found = self._per_gpu[gpu] = own if own is not None else self.constants.for_gpu(gpu)
        return found

    def seconds(self, work: Work, gpu: GPU, precision: str) -> float:
        key = (work, gpu, precision)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._seconds(work, gpu, precision)
        return hit

    def _seconds(self, work: Work, gpu: GPU, precision: str) -> float:
        if work.share != 1.0:  # a chunk: its share of the whole work's time
            return work.share * self.seconds(work._replace(share=1.0), gpu, precision)
        # a block's kernels repeat `layers` times: time one block and multiply
        if work.phase in ("forward", "backward") and work.layers > 1:
            # through the cache: a planner times one block shape in many layer counts
            one = self.seconds(work._replace(layers=1, head=False, embedding=False), gpu, precision)
            rest = self.seconds(work._replace(layers=0), gpu, precision)
            return one * work.layers + rest
        constants = self.constants_for(gpu)
        return sum(op_seconds(op, gpu, precision, constants)
                   for op in kernels(work, precision, self.constants.fused_attention))

    def breakdown(self, work: Work, gpu: GPU, precision: str) -> dict[str, float]:
        """Seconds per kernel label (summed over the blocks): what the time is made of."""
        out: dict[str, float] = {}
        constants = self.constants_for(gpu)
        for op in kernels(work, precision, self.constants.fused_attention):
            out[op.label] = out.get(op.label, 0.0) + op_seconds(op, gpu, precision, constants)
        return out


_TIMERS: dict[tuple, KernelTimer] = {}


def kernel_timer(params) -> KernelTimer:
    """The kernel timer for a Params' constants, shared by every run with the same constants
    (a fit re-simulates hundreds of cases with few distinct values)."""
    estimate = params.efficiency_estimate
    constants = ComputeConstants(params.gemm_fraction, params.gemm_half_s, params.memory_fraction, params.kernel_s,
                                 params.tf32_matmul, params.fused_attention,
                                 tuple(sorted((g, e.fractions) for g, e in params.efficiency_by_generation.items())),
                                 None if estimate is None else estimate.fractions)
    by_device = tuple(sorted(params.device_compute.items()))
    key = (constants, by_device)
    found = _TIMERS.get(key)
    if found is None:
        if len(_TIMERS) > 256:
            _TIMERS.clear()
        found = _TIMERS[key] = KernelTimer(constants, by_device)
    return found
