"""Every simulator-wide parameter, declared once: its key, unit, range, prior, fit range and source.

This table is the one place a parameter is written down. From it come: reading and writing
the parameters file (geosim/inputs/params.py: the key, the unit's scale to SI, the range every value
is checked against), what a fit may move and how hard its prior pulls (calibrate/free.py:
`fit`, `prior`), the check that the shipped defaults (geosim/data/params-default.toml) hold
every key and nothing else (tests/test_params_declared.py), and the reference tables of
docs/reference/params.md (`reference_table()`, checked by the same test; rewrite them with
`python tools/write_params_reference.py`).

To add a parameter: one `Scalar(...)` (or `Table(...)`) below, a field of that name in
`geosim.inputs.specs.Params` (SI units: the file's unit is converted here, at the boundary, never
inside the simulator), its shipped value in params-default.toml, then
`python tools/write_params_reference.py`. A runtime's number (geosim/data/runtimes.toml) is one
`Scalar(...)` in RUNTIME_NUMBERS (its `absent`: the value where a runtime's table leaves it out) and a
field of that name in `geosim.inputs.runtime.Runtime` defaulting to it; geosim/inputs/runtime.py checks and converts
it, docs/reference/runtimes.md's table lists it. Code never writes a declared number's default of its
own (tests/test_params_declared.py). A technique's own constants are not here: they are
`tunable(...)` fields of its Settings (geosim/techniques/_settings.py), declared in its file
with the same facts (help, range, fit range, source). Nor are a network backend's: each backend
declares its own with the same `Scalar` (geosim/sim/network/tcp.py: PARAMETERS, the file's
[transport] table), and geosim.inputs.params joins them to these (`geosim.inputs.params.ALL_SCALARS`).
"""

from __future__ import annotations

from dataclasses import dataclass

from geosim.base.units import GIB, KIB, MIB

# A range's default: wide (far beyond any real machine); it exists so that no parameters file can
# make a prediction infinite or NaN (a rate or an efficiency of 0 would divide by zero).
DEFAULT_RANGE = (0.0, 1e9)
FLAG = "flag"  # the unit of a true/false parameter
WHOLE = "count"  # the unit of a whole number
# file unit -> factor to the simulator's unit (SI: seconds, bytes, bit/s; fractions and counts as they are)
UNIT_SCALE = {
    "": 1.0, "fraction": 1.0, "RTT": 1.0, "s": 1.0, "us": 1e-6, "ms": 1e-3,
    "B": 1.0, "MiB": float(MIB), "KiB": float(KIB), "GiB": float(GIB), "Gbit/s": 1e9,
    WHOLE: 1.0, FLAG: 1.0,
}


@dataclass(frozen=True)
class Scalar:
    """One number (or flag) of the parameters file, `table.key = value` in `unit`."""

    key: str  # the TOML key, `table.name`; the unit is in its name
    field: str  # the geosim.inputs.specs.Params field that holds it, in SI units
    unit: str  # the file's unit (a key of UNIT_SCALE)
    help: str  # what it means, one line
    source: str  # where its default comes from
    range: tuple[float, float] = DEFAULT_RANGE  # (lowest, highest) a file may set, in the file's unit
    fit: tuple[float, float] | None = None  # the range `geosim calibrate fit` may move it in; None: never fitted
    prior: tuple[float, float] | None = None  # (centre, 1-sigma of its log): a fit's pull towards the centre
    absent: float | None = None  # a runtime's number only: its value where a runtime's table leaves it out
    becomes: str = ""  # a runtime's number only: what it turns into in a schedule

    @property
    def scale(self) -> float:
        return UNIT_SCALE[self.unit]

    def inside(self, value) -> bool:
        """A number (not a flag; a whole number where the unit is a count) within the declared range."""
        return (not isinstance(value, bool) and isinstance(value, int if self.unit == WHOLE else (int, float))
                and self.range[0] <= value <= self.range[1])

    def to_si(self, value):
        if self.unit == FLAG:
            return bool(value)
        if self.unit == WHOLE:
            return int(value)
        return float(value) * self.scale

    def from_si(self, value):
        if self.unit in (FLAG, WHOLE):
            return value
        return float(value) / self.scale


@dataclass(frozen=True)
class Table:
    """A table of numbers (or names) keyed by a technique, a GPU, a generation: `[key]` with `NAME = value`."""

    key: str
    field: str  # a Params field holding a dict NAME -> value (SI units)
    unit: str
    help: str
    source: str
    keyed_by: str  # technique | gpu | architecture | pcie-generation
    range: tuple[float, float] = DEFAULT_RANGE
    choices: tuple[str, ...] = ()  # for a table of names (collectives): the allowed values
    # the value for a name the table lacks (None: no default); a technique's numbers: the median of the
    # table's entries first (geosim.inputs.specs.Params.for_technique), this when the table is empty
    missing: float | str | None = None
    fit: tuple[float, float] | None = None
    prior: tuple[float, float] | None = None

    @property
    def scale(self) -> float:
        return 1.0 if self.choices else UNIT_SCALE[self.unit]


# A TCP connection's bounds, declared once: the TCP model's [transport] parameters (geosim/sim/network/tcp.py),
# a runtime's `streams` (RUNTIME_NUMBERS below) and a scenario's links (geosim.inputs.scenario.LINK_RANGES) read them;
# the command line's link flags (geosim/cli/common.py) and the sweep's link axes (geosim/studies/sweep/run.py)
# check against LINK_RANGES, so against these. A window beyond TCP's 1 GiB (RFC 7323) still parses: a fit may
# stand in several sockets' windows for one (streams x window is what a flow moves).
TCP_WINDOW_MIB_RANGE = (1e-3, 1e5)  # MiB of one socket's window
TCP_STREAMS_RANGE = (1, 1024)  # sockets per connection
STEP_RTTS_RANGE = (0.0, 1e3)  # round trips a collective step waits for flow control

COLLECTIVE_ALGORITHMS = ("ring", "tree", "hierarchical")
NVIDIA_GEMM = ("NVIDIA, Matrix Multiplication Background User's Guide (tile and wave quantization); "
               "public torch.matmul benchmarks")

SCALARS: tuple[Scalar, ...] = (
    # the op-level kernel timer (geosim/sim/compute.py)
    Scalar("compute.gemm_fraction", "gemm_fraction", "fraction",
           "attainable fraction of the tensor peak for large GEMMs, every GPU",
           "cuBLAS reaches roughly 65-80% of the datasheet peak on large fp16 GEMMs (" + NVIDIA_GEMM + ")",
           range=(1e-4, 1.0), fit=(0.05, 1.0), prior=(0.7, 0.5)),
    Scalar("compute.gemm_half_us", "gemm_half_s", "us",
           "a GEMM of (rate x this) FLOPs runs at half the large-GEMM rate",
           "a GEMM kernel's fill/drain ramp: well under a wave of tiles runs far below peak (" + NVIDIA_GEMM + ")",
           range=(0.0, 1e6)),
    Scalar("compute.memory_fraction", "memory_fraction", "fraction",
           "attainable fraction of the memory bandwidth for streaming kernels",
           "STREAM-like kernels reach about 80-90% of the datasheet bandwidth (BabelStream, Deakin et al.)",
           range=(1e-4, 1.0), fit=(0.05, 1.0), prior=(0.8, 0.4)),
    Scalar("compute.kernel_us", "kernel_s", "us", "launch gap per kernel",
           "a CUDA kernel launch costs a few microseconds; XLA (2022, no CUDA graphs) launches kernels one by one",
           range=(0.0, 1e6)),
    # inside a VM and between VMs of one site (geosim/sim/network/_topology.py)
    Scalar("host.latency_us", "intra_host_latency_s", "us", "one-way latency between GPUs of one VM",
           "a PCIe round trip through host memory", range=(0.0, 1e6)),
    Scalar("host.nvlink_gbps", "nvlink_bps", "Gbit/s", "GPU-to-GPU rate over NVLink (intra_host = \"nvlink\")",
           "NVLink 3 (A100): 600 GB/s both directions", range=(1e-6, 1e6)),
    Scalar("host.lan_rtt_ms", "lan_rtt_s", "ms", "RTT between VMs of one site (through the site's LAN)",
           "a data-centre LAN", range=(0.0, 1e5)),
    Scalar("host.lan_bandwidth_gbps", "lan_bandwidth_bps", "Gbit/s", "bandwidth between VMs of one site",
           "FABRIC's 25 Gbit/s dedicated NICs", range=(1e-6, 1e5)),
    # XLA
    Scalar("xla.combine_mib", "combine_bytes", "MiB",
           "XLA's combiner merges gradient collectives into buffers of up to this; each pays a collective's latency",
           "XLA's kDefaultAllReduceCombineThreshold (30 MiB)", range=(1e-3, 1e6)),
    # memory (geosim/sim/memory_layout.py)
    Scalar("memory.workspace_gib", "workspace_bytes", "GiB", "cuBLAS and XLA scratch per GPU",
           "chosen from out-of-memory records when a fit has some", range=(0.0, 1e5)),
    Scalar("memory.usable_fraction", "usable_memory_fraction", "fraction",
           "of a GPU's memory, what JAX's allocator preallocates",
           "XLA_PYTHON_CLIENT_MEM_FRACTION's default in the jaxlib 0.3 releases Alpa pins", range=(0.05, 1.0)),
    Scalar("memory.margin_fraction", "memory_margin_fraction", "fraction",
           "within this of the usable memory a prediction says \"may not fit\"",
           "the memory model's spread against XLA's own buffer assignment of live's step (bench/bench_memory.py, "
           "docs/results/2026-11-25-memory-xla.md: median 3%, most cases within 10%)", range=(0.0, 0.9)),
    # convergence
    Scalar("convergence.compressed_activation_efficiency", "compressed_activation_efficiency", "fraction",
           "multiplies the token efficiency of a pipeline whose activations cross compressed",
           "+0.5% loss, \"modest cost\" (Obeidi et al. 2026)", range=(1e-6, 10.0)),
)

TABLES: tuple[Table, ...] = (
    Table("compute.flat_fraction", "flat_fraction", "fraction",
          "a flat fraction of peak for a device the datasheet model does not describe; wins over a runtime's "
          "measured device constants (runtimes.toml device_compute)",
          "`geosim live validate` fits it for a CPU device no runtime measured; empty by default", "gpu",
          range=(1e-6, 1.0)),
    Table("host.pcie_gbps", "pcie_bps", "Gbit/s", "effective GPU-to-host rate per PCIe generation (x16)",
          "PCIe 3/4/5 x16 line rates less protocol overhead", "pcie-generation", range=(1e-6, 1e6), missing=80.0),
    Table("collectives", "collectives", "", "collective algorithm per technique",
          "NCCL's default ring", "technique", choices=COLLECTIVE_ALGORITHMS, missing="ring"),
    Table("overhead.iteration_s", "iteration_overhead_s", "s",
          "fixed cost per iteration (launch, optimizer, host sync); per inner step for low-communication techniques",
          "fitted to the study's Table II (one value for every technique)", "technique", range=(0.0, 1e5),
          missing=0.15, fit=(1e-4, 1.0), prior=(0.1, 1.0)),
    Table("overhead.startup_s", "startup_s", "s", "once per run: compilation and placement",
          "the study's runs' start-up, rounded", "technique", range=(0.0, 1e8), missing=60.0),
    Table("convergence.token_efficiency", "token_efficiency", "fraction",
          "tokens Data needs / tokens this technique needs for the same loss (used by --target-tokens); "
          "a technique without an entry is assumed 1.0, and the output says so",
          "loss gaps read off the papers, turned into tokens with Chinchilla's fit", "technique",
          range=(1e-6, 10.0)),
)

# A runtime's keys (geosim/data/runtimes.toml, a parameters file's [runtime.NAME]; geosim/inputs/runtime.py reads them
# through these). A number's `absent`: the value of a runtime whose table leaves the key out (None: the
# parameters file's own value of that cost). What each key becomes in a schedule: docs/reference/runtimes.md,
# whose table is generated from these.
RUNTIMES_FILE = "geosim/data/runtimes.toml, beside each runtime's value"
RUNTIME_NUMBERS: tuple[Scalar, ...] = (
    Scalar("iteration_s", "iteration_s", "s",
           "fixed cost per optimizer step (step launch, host sync, Python); absent: the parameters file's "
           "per-technique `[overhead.iteration_s]`", RUNTIMES_FILE, becomes="the step's `iteration overhead` op",
           range=(0.0, 1e7), fit=(1e-5, 1.0), absent=None),
    Scalar("microbatch_s", "microbatch_s", "s", "fixed cost per microbatch; absent: 0",
           RUNTIMES_FILE, becomes="added to the step's overhead x microbatches", range=(0.0, 1e7), absent=0.0),
    Scalar("collective_launch_s", "collective_launch_s", "s",
           "fixed cost per gradient collective launched (per buffer or bucket; none for a group of one GPU); absent: 0",
           RUNTIMES_FILE, becomes="an overhead op before each buffer's collective", range=(0.0, 1e7), fit=(1e-6, 1.0), absent=0.0),
    Scalar("startup_s", "startup_s", "s",
           "once per run: compilation, placement, process-group set-up; absent: the parameters file's "
           "`[overhead.startup_s]`", RUNTIMES_FILE, becomes="the prediction's start-up", range=(0.0, 1e7), absent=None),
    Scalar("kernel_us", "kernel_s", "us", "launch gap per kernel; absent: `[compute] kernel_us`",
           RUNTIMES_FILE, becomes="the kernel timer's per-kernel cost", range=(0.0, 1e7), absent=None),
    Scalar("collective_step_rtts", "collective_step_rtts", "RTT",
           "round trips each collective step waits besides its bytes (the library's handshakes); absent: "
           "`[transport] collective_step_rtts` (NCCL's)", RUNTIMES_FILE, becomes="the TCP model's per-step wait",
           range=STEP_RTTS_RANGE, fit=(1e-3, 50.0), absent=None),
    Scalar("streams", "streams", WHOLE,
           "TCP sockets each connection of the runtime's collective library opens (gloo: one per pair of ranks; "
           "NCCL: NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS); absent: `[transport] streams`", RUNTIMES_FILE,
           becomes="the TCP model's streams per connection", range=TCP_STREAMS_RANGE, absent=None),
    Scalar("usable_memory_fraction", "usable_memory_fraction", "fraction",
           "of a GPU's memory, what the runtime's allocator may use (jax: XLA_PYTHON_CLIENT_MEM_FRACTION); absent: "
           "`[memory] usable_fraction`", RUNTIMES_FILE, becomes="the memory verdict's limit", range=(0.05, 1.0),
           absent=None),
)
# device_compute's constants: the op-level kernel timer's, on a device whose speed a runtime measured (XLA:CPU
# on live's CPU devices). Their fractions are of the records' nominal CPU datasheet (live/train/record.py's
# [gpus.CPU]: cores x 2.5 GHz x 32 FLOP/cycle, 20 GB/s), which measured code may exceed (AVX-512, a faster
# clock): hence a range to 10, where compute.gemm_fraction's, of a GPU's datasheet peak, stops at 1.
DEVICE_COMPUTE: tuple[Scalar, ...] = (
    Scalar("gemm_fraction", "gemm_fraction", "fraction", "large GEMMs' fraction of the device's nominal peak",
           "live/experiments/cpu_compute.py", range=(1e-4, 10.0)),
    Scalar("gemm_half_us", "gemm_half_s", "us", "a GEMM of (rate x this) FLOPs runs at half the large-GEMM rate",
           "live/experiments/cpu_compute.py", range=(0.0, 1e4)),
    Scalar("memory_fraction", "memory_fraction", "fraction",
           "streaming kernels' fraction of the device's nominal bandwidth", "live/experiments/cpu_compute.py",
           range=(1e-4, 10.0)),
    Scalar("kernel_us", "kernel_s", "us", "launch gap per kernel", "live/experiments/cpu_compute.py",
           range=(0.0, 1e4)),
)
RUNTIME_BY_KEY: dict[str, Scalar] = {p.key: p for p in RUNTIME_NUMBERS}


BY_KEY: dict[str, Scalar] = {p.key: p for p in SCALARS}
TABLE_BY_KEY: dict[str, Table] = {t.key: t for t in TABLES}
BY_FIELD: dict[str, Scalar | Table] = {p.field: p for p in (*SCALARS, *TABLES)}


def fittable(scalars: tuple[Scalar, ...] = SCALARS) -> dict[str, Scalar]:
    """The scalars a fit may move, key -> declaration (of these; geosim.inputs.params.fittable: with the network's)."""
    return {p.key: p for p in scalars if p.fit is not None}


def priors(scalars: tuple[Scalar, ...] = SCALARS) -> dict[str, tuple[float, float]]:
    """key -> (centre, 1-sigma of its log), for every scalar with a prior."""
    return {p.key: p.prior for p in scalars if p.prior is not None}


def missing_value(field: str):
    """A technique-keyed table's value for a technique it does not name: a sane default, never 0."""
    return BY_FIELD[field].missing


def number_text(value) -> str:
    """A default or a bound as the reference shows it."""
    return "true" if value is True else "false" if value is False else f"{value:g}"


def _range(low, high, unit: str) -> str:
    if unit == FLAG:
        return ""
    return f"{number_text(low)} to {number_text(high)}"


def reference_table(shipped: dict[str, object], scalars: tuple[Scalar, ...] = SCALARS,
                    tables: tuple[Table, ...] = TABLES) -> str:
    """The markdown table of these scalars and tables (every simulator-wide one by default; a network
    model's PARAMETERS and no tables for its own); shipped: the flattened defaults file."""
    rows = ["| key | unit | default | range | fit range | prior (centre, 1-sigma of log) | meaning | source |",
            "|---|---|---|---|---|---|---|---|"]
    for p in scalars:
        value = shipped.get(p.key)
        rows.append(f"| `{p.key}` | {p.unit} | {'' if value is None else number_text(value)} | "
                    f"{_range(*p.range, p.unit)} | {'' if p.fit is None else _range(*p.fit, p.unit)} | "
                    f"{'' if p.prior is None else f'{number_text(p.prior[0])}, sigma {number_text(p.prior[1])}'} | "
                    f"{p.help} | {p.source} |")
    for t in tables:
        table = shipped.get(t.key) or {}
        values = sorted({v for v in table.values()}, key=str) if isinstance(table, dict) else []
        shown = (f"{number_text(values[0]) if not isinstance(values[0], str) else values[0]} for each {t.keyed_by}"
                 if len(values) == 1 else ", ".join(f"{k} {v:g}" if not isinstance(v, str) else f"{k} {v}"
                                                      for k, v in table.items()) or "empty")
        allowed = " \\| ".join(t.choices) if t.choices else _range(*t.range, t.unit)
        missing = ("" if t.missing is None or t.keyed_by != "technique"
                   else f" (one it does not name: {t.missing})" if isinstance(t.missing, str)
                   else f" (one it does not name: the median of the entries, else {number_text(t.missing)})")
        if t.missing is not None and t.keyed_by != "technique":
            missing = f" (one it does not name: {number_text(t.missing)})"
        rows.append(f"| `{t.key}.NAME` | {t.unit} | {shown} | {allowed} | "
                    f"{'' if t.fit is None else _range(*t.fit, t.unit)} | "
                    f"{'' if t.prior is None else f'{number_text(t.prior[0])}, sigma {number_text(t.prior[1])}'} | "
                    f"{t.help}; NAME: {t.keyed_by}{missing} | {t.source} |")
    return "\n".join(rows) + "\n"


@dataclass(frozen=True)
class RuntimeKey:
    """A runtime table's keys that are not numbers (a flag, a choice, a table, a list), one row of the reference."""

    keys: tuple[str, ...]
    help: str
    becomes: str


RUNTIME_OTHER_KEYS: tuple[RuntimeKey, ...] = (
    RuntimeKey(("overlap_backward",), "data parallelism reduces gradient buckets while the backward runs",
               "Data's schedule: the last microbatch's backward in bucket-sized pieces, each bucket reduced by "
               "non-blocking sends (techniques/data.py)"),
    RuntimeKey(("tp_comm_overlap",), "tensor parallelism's collectives run under the GEMMs around them (Megatron-LM's "
               "--tp-comm-overlap with sequence parallelism: Transformer Engine's userbuffers)",
               "Shard's layers: each all-reduce as an all-gather before a part's GEMMs and a reduce-scatter after "
               "them, ring exchanges of non-blocking sends, the part's compute in 2p chunks, each chunk's transfer "
               "under the next chunk's GEMM (techniques/shard.py)"),
    RuntimeKey(("gradient_buckets",), "`\"combiner\"` (XLA's, `[xla] combine_mib`), `\"whole\"` (one flat buffer) or a "
               "bucket size in MiB", "how many collectives a gradient takes"),
    RuntimeKey(("device_compute",), "the op-level kernel timer's constants on a device whose speed this runtime was "
               "measured on: `{ DEVICE = { " + ", ".join(p.key for p in DEVICE_COMPUTE) + " } }` (their ranges: "
               + "; ".join(f"{p.key} {number_text(p.range[0])} to {number_text(p.range[1])} {p.unit}"
                           for p in DEVICE_COMPUTE)
               + "; a fraction is of the nominal datasheet, so above 1 is possible); a parameters file's flat "
               "`[compute.flat_fraction]` for that device wins",
               "the kernel timer's GEMM rate, streaming rate and per-kernel gap on that device (the global "
               "`[compute]` constants stay the GPUs')"),
    RuntimeKey(("shard_layer_collectives", "shard_step_collectives"),
               "Shard's collectives as the runtime's compiler emits them, per layer and per step outside the layers: "
               "`[{ op, count, activations }]` (op `allreduce`, `all_gather` or `reduce_scatter`; size in one "
               "microbatch's tokens x `n_embd` values); absent: Megatron's 4 all-reduces a layer",
               "Shard's schedule: each a collective of that size after the runtime's launch cost"),
    RuntimeKey(("pipeshard_tick_collectives", "pipeshard_step_collectives"),
               "what the runtime's pipeline step runs besides the schedule's stage sends, once per tick of its loop "
               "(M + S - 1 a step) and once a step, in the same form; absent: none",
               "Pipeshard's schedule: collectives among the stages after the microbatches, each after the launch cost"),
    RuntimeKey(("pipeshard_sends_every_tick",), "the pipeline loop exchanges between stages on every one of its "
               "M + S - 1 ticks; absent: false", "S - 1 more sends each way (the bubble ticks'), after each "
               "direction's last real one"),
    RuntimeKey(("tf32_matmul",), "fp32 matmuls run on the GPU's TF32 tensor cores (Ampere and newer): XLA's default "
               "precision does, PyTorch's `allow_tf32` does not; absent: false",
               "an fp32 GEMM at the catalog's `tf32_tensor_tflops` (capped by board power as the 16-bit rate is)"),
    RuntimeKey(("fused_attention",), "attention is one fused kernel that never writes the S x S scores (flash "
               "attention, PyTorch's SDPA); absent: false", "no softmax passes over the scores, half the causal "
               "products, the scores recomputed in the backward; no scores kept in memory"),
    RuntimeKey(("memory_layout",), "`\"alpa\"` (TrainState: 16-bit weights, an fp32 master copy, a workspace), "
               "`\"alpa-0.2.3\"` (that, plus the buffers Alpa 0.2.3's code allocates: apply_grad's divided "
               "gradients, a pipeline stage's JAX residual list and received inputs) or "
               "`\"jax\"` (live's step: fp32 weights, as XLA assigns its buffers); absent: `\"alpa\"`",
               "every technique's memory: Alpa's layout, or the technique's `jax_placement()` through `live_step`"),
    RuntimeKey(("efficiency",), "what the runtime achieves on each GPU generation (geosim/data/generations.toml): "
               "`[NAME.efficiency.GENERATION]` with `gemm_fraction`, `memory_fraction`, `gemm_half_us` (as the "
               "`[compute]` constants; or `fitted = true`: the parameters file's `[compute]` constants, which "
               "`geosim calibrate fit` moves), `kind` (`measured`, `published` or `estimated`), `source` and, for a "
               "measured entry, `refit` (the command that refits it)",
               "the kernel timer's constants on that generation's GPUs; a generation without an entry runs "
               "with the runtime's estimate (the median of its measured and published entries), and the "
               "prediction names it and gives an interval"),
    RuntimeKey(("description", "source"), "what the runtime is; where its values come from", "the output's notes"),
)


def runtime_reference_table() -> str:
    """The markdown table of a runtime's keys (docs/reference/runtimes.md), from these declarations."""
    rows = ["| key | unit | range | fit range | meaning | becomes |", "|---|---|---|---|---|---|"]
    for p in RUNTIME_NUMBERS:
        rows.append(f"| `{p.key}` | {p.unit} | {_range(*p.range, p.unit)} | "
                    f"{'' if p.fit is None else _range(*p.fit, p.unit)} | {p.help} | {p.becomes} |")
    for k in RUNTIME_OTHER_KEYS:
        rows.append(f"| {', '.join(f'`{key}`' for key in k.keys)} |  |  |  | {k.help} | {k.becomes} |")
    return "\n".join(rows) + "\n"
