"""Runtimes: the software stack that runs a technique (Alpa, JAX as `geosim live` runs it,
PyTorch DDP) and the fixed costs that belong to it rather than to the hardware.

A workload names its runtime (Workload.runtime, default "alpa"); its costs are read from
geosim/data/runtimes.toml (sources beside every value), or from Params.runtimes where a fit
changed them. Alpa's table leaves its per-iteration and start-up costs to the parameters
file ([overhead.iteration_s], [overhead.startup_s], fitted to the study), so `--runtime alpa`
is the simulator as the study was fitted, to the bit.

What each cost becomes in a schedule:
- iteration_s + microbatches x microbatch_s: the step's "iteration overhead" op;
- collective_launch_s: a fixed-seconds op before every gradient buffer's collective;
- startup_s: the prediction's start-up (once per run);
- overlap_backward: Data's gradient buckets are reduced while the backward runs (techniques/data.py);
- gradient_buckets: how the gradient is cut into collectives (XLA's combiner, one buffer, DDP's buckets);
- kernel_s: the kernel timer's launch gap per kernel;
- device_compute: the kernel timer's constants on a device this runtime's speed was measured on (XLA:CPU).
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, replace
from importlib import resources

from geosim.inputs.efficiency import efficiency_table, efficiency_tables, estimate, spread
from geosim.base.errors import GeosimError
from geosim.base.generations import generation
from geosim.base.parameters import DEVICE_COMPUTE, RUNTIME_BY_KEY, RUNTIME_OTHER_KEYS
from geosim.inputs.specs import MIB, ComputeConstants, Efficiency, Params, Workload

DEFAULT_RUNTIME = "alpa"  # the study's: keeps every prediction the study was fitted with
SOURCE = "geosim/data/runtimes.toml"


@dataclass(frozen=True)
class Runtime:
    name: str
    description: str = ""
    # the numbers' meanings, ranges and values where a table leaves them out: geosim.base.parameters.RUNTIME_NUMBERS
    iteration_s: float | None = RUNTIME_BY_KEY["iteration_s"].absent  # None: [overhead.iteration_s][technique]
    microbatch_s: float = RUNTIME_BY_KEY["microbatch_s"].absent
    collective_launch_s: float = RUNTIME_BY_KEY["collective_launch_s"].absent
    startup_s: float | None = RUNTIME_BY_KEY["startup_s"].absent  # None: [overhead.startup_s][technique]
    overlap_backward: bool = False
    # tensor parallelism's collectives under the GEMMs around them (Megatron-LM's --tp-comm-overlap): Shard's
    # layers as ring exchanges of non-blocking sends between GEMM chunks (techniques/shard.py)
    tp_comm_overlap: bool = False
    gradient_buckets: str | float = "combiner"  # "combiner" | "whole" | bucket size in MiB
    kernel_s: float | None = RUNTIME_BY_KEY["kernel_us"].absent  # None: the parameters file's compute.kernel_us
    # round trips each step of a collective waits besides its bytes (the collective library's own
    # handshakes: NCCL's credit, gloo's per-step rendezvous); None: the parameters file's
    # transport.collective_step_rtts (NCCL's, fitted to the study)
    collective_step_rtts: float | None = RUNTIME_BY_KEY["collective_step_rtts"].absent
    # TCP sockets each connection of the runtime's collective library opens (gloo: one per pair of
    # ranks; NCCL: NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS); None: the parameters file's transport.streams
    streams: int | None = RUNTIME_BY_KEY["streams"].absent
    # the op-level kernel timer's constants on devices whose speed this runtime measured rather than
    # the GPU calibration describes (XLA:CPU on the CPU "GPUs" of live runs: live/experiments/cpu_compute.py):
    # (device name, ComputeConstants); a parameters file's flat [compute.flat_fraction] wins
    device_compute: tuple[tuple[str, ComputeConstants], ...] = ()
    # Shard's collectives as this runtime's compiler emits them, (op, count, size in activations): per
    # layer and per step outside the layers (jax: read from live's compiled step by
    # live/train/compiled_collectives.py). Empty: Megatron's count (shard.collectives_per_layer).
    shard_layer_collectives: tuple[tuple[str, int, float], ...] = ()
    shard_step_collectives: tuple[tuple[str, int, float], ...] = ()
    # what this runtime's pipeline step runs besides the schedule's stage sends (jax: live's GPipe scan,
    # read by compiled_collectives.pipeline_tables): per tick (M + S - 1 a step) and once a step
    pipeshard_tick_collectives: tuple[tuple[str, int, float], ...] = ()
    pipeshard_step_collectives: tuple[tuple[str, int, float], ...] = ()
    # the runtime's pipeline loop exchanges between stages on every tick (M + S - 1), not once a microbatch
    pipeshard_sends_every_tick: bool = False
    # kernel choices that are the runtime's, not the GPU's: fp32 matmuls on TF32 tensor cores (XLA's
    # default precision on Ampere and newer; PyTorch's torch.backends.cuda.matmul.allow_tf32 is False by
    # default), attention as one fused kernel that never writes the scores (PyTorch's SDPA)
    tf32_matmul: bool = False
    fused_attention: bool = False
    # what this runtime achieves on each GPU generation: (generation, Efficiency), each with its source kind;
    # a generation without an entry runs with estimate()
    efficiency: tuple[tuple[str, Efficiency], ...] = ()
    # how the step's memory is laid out: "alpa" (TrainState: 16-bit weights, fp32 master, a workspace) or
    # "jax" (live's step: fp32 weights, XLA's buffer assignment, geosim.sim.memory_layout.live_step)
    memory_layout: str = "alpa"
    # of a GPU's memory, what this runtime's allocator may use (jax's XLA_PYTHON_CLIENT_MEM_FRACTION);
    # None: the parameters file's memory.usable_fraction (the jaxlib Alpa pins)
    usable_memory_fraction: float | None = RUNTIME_BY_KEY["usable_memory_fraction"].absent
    source: str = ""

    def estimate(self) -> Efficiency:
        """This runtime's efficiency on a GPU generation it has no entry for: the median of its measured and
        published entries (the global constants where those are the parameters file's fit), else of every
        shipped runtime's; kind "estimated", its source saying from which entries."""
        return estimate(self.name, self.efficiency, shipped_entries())

    def estimated_entries(self, generations_used) -> list[Efficiency]:
        """The entries a prediction on GPUs of these generations rests on that are estimates: an entry of
        kind "estimated", or the runtime's estimate where it has none (GPU generations only: a CPU share
        runs with its measured device constants or the global ones)."""
        entries = dict(self.efficiency)
        out = []
        for name in sorted(set(generations_used)):
            if generation(name) is None:
                continue
            entry = entries.get(name) or replace(self.estimate(), generation=name)
            if entry.kind == "estimated":
                out.append(entry)
        return out

    def iteration_overhead_s(self, technique: str, params: Params, workload: Workload) -> float:
        """Fixed seconds per optimizer step, microbatches included."""
        base = params.for_technique("iteration_overhead_s", technique) if self.iteration_s is None else self.iteration_s
        if self.microbatch_s:
            base += workload.microbatches * self.microbatch_s
        return base

    def startup(self, technique: str, params: Params) -> float:
        return params.for_technique("startup_s", technique) if self.startup_s is None else self.startup_s

    def buffers(self, nbytes: float, params: Params) -> int:
        """How many collectives a gradient of nbytes is reduced in."""
        if self.gradient_buckets == "whole":
            return 1
        size = params.combine_bytes if self.gradient_buckets == "combiner" else float(self.gradient_buckets) * MIB
        return max(1, math.ceil(nbytes / size))

    def applied_to(self, params: Params) -> Params:
        """The parameters a simulation runs with under this runtime: its own launch gap per kernel
        and its collectives' round trips, where it has them."""
        changes = {}
        by_generation = dict(self.efficiency)
        choices = {"tf32_matmul": self.tf32_matmul, "fused_attention": self.fused_attention,
                   "efficiency_by_generation": by_generation, "efficiency_estimate": self.estimate()}
        if self.usable_memory_fraction is not None:
            choices["usable_memory_fraction"] = self.usable_memory_fraction
        changes.update({k: v for k, v in choices.items() if getattr(params, k) != v})
        if self.kernel_s is not None and self.kernel_s != params.kernel_s:
            changes["kernel_s"] = self.kernel_s
        missing = {d: e for d, e in self.device_compute if d not in params.flat_fraction}
        if missing:
            changes["device_compute"] = {**params.device_compute, **missing}
        applied = replace(params, **changes) if changes else params
        if self.collective_step_rtts is not None and STEP_RTTS_MODEL in params.networks and \
                self.collective_step_rtts != params.network(STEP_RTTS_MODEL).collective_step_rtts:
            applied = applied.with_network(STEP_RTTS_MODEL, collective_step_rtts=self.collective_step_rtts)
        if self.streams is not None and STEP_RTTS_MODEL in params.networks and \
                self.streams != params.network(STEP_RTTS_MODEL).streams:
            applied = applied.with_network(STEP_RTTS_MODEL, streams=self.streams)
        return applied


def runtime_differences(runtime: Runtime, params: Params) -> list[str]:
    """How a runtime's fixed costs differ from the study's fit (the parameters file's, Alpa's): what a
    prediction under it pays besides the hardware, one phrase each, so a time several times Alpa's says
    why (geosim predict prints them under the table)."""
    if runtime.name == DEFAULT_RUNTIME:
        return []
    said = []
    if runtime.collective_step_rtts is not None and STEP_RTTS_MODEL in params.networks:
        fitted = params.network(STEP_RTTS_MODEL).collective_step_rtts
        if runtime.collective_step_rtts != fitted:
            said.append(f"each collective step waits {runtime.collective_step_rtts:g} round trips "
                        f"(the parameters' {fitted:g}, NCCL's)")
    pairs = (("shard_layer_collectives", "a tensor-sharded layer"), ("shard_step_collectives", "a sharded step"),
             ("pipeshard_tick_collectives", "a pipeline tick"), ("pipeshard_step_collectives", "a pipeline step"))
    compiled = [f"{sum(count for _, count, _ in getattr(runtime, field))} in {where}"
                for field, where in pairs if getattr(runtime, field)]
    if compiled:
        said.append(f"collectives as its compiler emits them: {', '.join(compiled)}")
    if runtime.pipeshard_sends_every_tick:
        said.append("pipeline stages exchange on every tick (M + S - 1 a step), not once a microbatch")
    if runtime.gradient_buckets == "whole":
        said.append("the gradient reduced in one buffer")
    elif not isinstance(runtime.gradient_buckets, str):
        said.append(f"the gradient reduced in {runtime.gradient_buckets:g} MiB buckets")
    if runtime.overlap_backward:
        said.append("gradient collectives overlap the backward")
    if runtime.tp_comm_overlap:
        said.append("tensor parallelism's collectives overlap its GEMMs")
    if runtime.kernel_s is not None and runtime.kernel_s != params.kernel_s:
        said.append(f"{runtime.kernel_s * 1e6:g} us of launch gap a kernel (the parameters' {params.kernel_s * 1e6:g})")
    if runtime.startup_s is not None:
        said.append(f"start-up {runtime.startup_s:g} s")
    if runtime.iteration_s is not None or runtime.microbatch_s:
        said.append(f"{(runtime.iteration_s or 0.0) * 1e3:g} ms a step + {runtime.microbatch_s * 1e3:g} ms a "
                    f"microbatch outside the model")
    return said


# the network backend whose collective steps wait round trips (its Settings' collective_step_rtts, the
# file's transport.collective_step_rtts): what a runtime's own collective_step_rtts replaces
STEP_RTTS_MODEL = "tcp"
COLLECTIVE_LISTS = ("shard_layer_collectives", "shard_step_collectives", "pipeshard_tick_collectives",
                    "pipeshard_step_collectives")
COLLECTIVE_OPS = ("allreduce", "all_gather", "reduce_scatter")
KEYS = {*RUNTIME_BY_KEY, *(key for declared in RUNTIME_OTHER_KEYS for key in declared.keys)}
FLAGS = ("overlap_backward", "pipeshard_sends_every_tick", "tf32_matmul", "fused_attention", "tp_comm_overlap")
MEMORY_LAYOUTS = ("alpa", "alpa-0.2.3", "jax")
_SHIPPED: dict[str, Runtime] = {}


def runtime_from_table(name: str, table: dict, source: str = SOURCE, prefix: str = "") -> Runtime:
    """A runtime from its TOML table, every value checked (one line naming the key otherwise; prefix:
    the tables holding it, in that line's key, e.g. "runtime." in a parameters file)."""
    if not isinstance(table, dict):
        raise GeosimError("must be a table", source=source, key=prefix + name)
    values: dict = {}
    for key, value in table.items():
        where = f"{prefix}{name}.{key}"
        if key not in KEYS:
            raise GeosimError(f"unknown key (expected one of: {', '.join(sorted(KEYS))})", source=source, key=where)
        if key in RUNTIME_BY_KEY:
            number = RUNTIME_BY_KEY[key]
            if not number.inside(value):
                raise GeosimError(f"must be a number in [{number.range[0]:g}, {number.range[1]:g}], got {value!r}",
                                  source=source, key=where)
            values[number.field] = number.to_si(value)
        elif key == "device_compute":
            values[key] = device_compute_tables(value, source, where)
        elif key in COLLECTIVE_LISTS:
            values[key] = collective_list(value, source, where)
        elif key == "memory_layout":
            if value not in MEMORY_LAYOUTS:
                raise GeosimError(f"must be one of {', '.join(MEMORY_LAYOUTS)}, got {value!r}", source=source, key=where)
            values[key] = value
        elif key == "efficiency":
            values[key] = efficiency_tables(value, source, where)
        elif key in FLAGS:
            if not isinstance(value, bool):
                raise GeosimError(f"must be true or false, got {value!r}", source=source, key=where)
            values[key] = value
        elif key == "gradient_buckets":
            ok = value in ("combiner", "whole") or (not isinstance(value, bool) and isinstance(value, (int, float))
                                                      and 0.001 <= value <= 1e6)
            if not ok:
                raise GeosimError(f"must be \"combiner\", \"whole\" or a bucket size in MiB, got {value!r}",
                                  source=source, key=where)
            values[key] = value if isinstance(value, str) else float(value)
        else:
            values[key] = str(value)
    return Runtime(name, **values)


def collective_list(value, source: str, where: str) -> tuple[tuple[str, int, float], ...]:
    """[{op, count, activations}, ...] -> ((op, count, activations), ...), each entry checked."""
    problem = (f"must be a list of {{ op = {' | '.join(COLLECTIVE_OPS)}, count = N, activations = size }}, "
               f"got {value!r}")
    if not isinstance(value, list):
        raise GeosimError(problem, source=source, key=where)
    out = []
    for entry in value:
        ok = (isinstance(entry, dict) and set(entry) == {"op", "count", "activations"} and entry["op"] in COLLECTIVE_OPS
              and isinstance(entry["count"], int) and not isinstance(entry["count"], bool) and 0 <= entry["count"] < 1e6
              and isinstance(entry["activations"], (int, float)) and not isinstance(entry["activations"], bool)
              and 0 <= entry["activations"] < 1e6)
        if not ok:
            raise GeosimError(problem, source=source, key=where)
        out.append((entry["op"], entry["count"], float(entry["activations"])))
    return tuple(out)


# a device's compute constants: key -> (ComputeConstants field, factor from the key's unit to SI, allowed range),
# as geosim.base.parameters.DEVICE_COMPUTE declares them (why a fraction there may exceed 1, too)
DEVICE_COMPUTE_KEYS = {p.key: (p.field, p.scale, p.range) for p in DEVICE_COMPUTE}


def device_compute_tables(value, source: str, where: str) -> tuple[tuple[str, ComputeConstants], ...]:
    """{ DEVICE = { gemm_fraction, gemm_half_us, memory_fraction, kernel_us } } -> ((name, ComputeConstants), ...)."""
    if not isinstance(value, dict) or not value:
        raise GeosimError(f"must be a table of device name = {{ {', '.join(DEVICE_COMPUTE_KEYS)} }}, got {value!r}",
                          source=source, key=where)
    out = []
    for device, table in sorted(value.items()):
        if not isinstance(table, dict) or set(table) != set(DEVICE_COMPUTE_KEYS):
            raise GeosimError(f"must set exactly {', '.join(DEVICE_COMPUTE_KEYS)}, got {table!r}", source=source,
                              key=f"{where}.{device}")
        fields = {}
        for key, (field, factor, (lo, hi)) in DEVICE_COMPUTE_KEYS.items():
            v = table[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
                raise GeosimError(f"must be a number in [{lo:g}, {hi:g}], got {v!r}", source=source,
                                  key=f"{where}.{device}.{key}")
            fields[field] = float(v) * factor
        out.append((str(device), ComputeConstants(**fields)))
    return tuple(out)


def device_compute_table(entries) -> dict:
    """device_compute_tables' inverse: the TOML table a parameters file writes."""
    return {device: {key: getattr(eff, field) / factor for key, (field, factor, _) in DEVICE_COMPUTE_KEYS.items()}
            for device, eff in entries}


def efficiency_spread() -> float:
    """How far an estimated entry may be off, either way: the spread of the shipped runtimes' measured and
    published entries (geosim.inputs.efficiency.spread)."""
    return spread(shipped_entries())


def shipped_entries() -> list[Efficiency]:
    return [e for rt in shipped_runtimes().values() for _, e in rt.efficiency]


# a table's key -> the Runtime field it sets (the same name but for the launch gap, in microseconds)
FIELD_OF_KEY = {**{k: k for k in KEYS}, **{k: p.field for k, p in RUNTIME_BY_KEY.items()}}


def runtime_changes_table(runtime: Runtime) -> dict:
    """What a parameters file writes for a runtime a fit changed: the keys (runtimes.toml's names and
    units) whose values differ from the shipped runtime of that name; runtime_from_table reads them."""
    shipped = shipped_runtimes().get(runtime.name, Runtime(runtime.name))
    table: dict = {}
    for key, field in FIELD_OF_KEY.items():
        value = getattr(runtime, field)
        if value == getattr(shipped, field) or value is None:  # None: "as the parameters file says", shipped only
            continue
        if key == "efficiency" and not value:  # no entries: nothing to write (a table must hold one)
            continue
        table[key] = (RUNTIME_BY_KEY[key].from_si(value) if key in RUNTIME_BY_KEY
                      else device_compute_table(value) if key == "device_compute"
                      else [{"op": o, "count": n, "activations": a} for o, n, a in value] if key in COLLECTIVE_LISTS
                      else efficiency_table(value) if key == "efficiency"
                      else value)
    return table


def changed_runtimes(tables, current: dict, source: str) -> dict:
    """Params.runtimes with a parameters file's [runtime.NAME] tables applied: each names a shipped
    runtime and sets some of its keys, or adds a runtime of the user's own (a table with its description;
    keys checked as in runtimes.toml; `--runtime NAME` then runs it)."""
    if not isinstance(tables, dict):
        raise GeosimError("must be a table of runtimes ([runtime.NAME])", source=source, key="runtime")
    merged = dict(current or {})
    for name, table in tables.items():
        if name not in shipped_runtimes() and name not in merged and not (isinstance(table, dict)
                                                                          and "description" in table):
            raise GeosimError(f"unknown runtime {name!r} (known: {', '.join(runtime_names())}; a new runtime's "
                              "table gives its description, source and keys)", source=source, key=f"runtime.{name}")
        parsed = runtime_from_table(name, table, source, prefix="runtime.")
        # a runtime of the user's own starts from a table's defaults (Runtime's), a shipped one from its file
        base = merged.get(name) or shipped_runtimes().get(name) or Runtime(name)
        merged[name] = replace(base, **{FIELD_OF_KEY[k]: getattr(parsed, FIELD_OF_KEY[k]) for k in table})
    return merged


def shipped_runtimes() -> dict[str, Runtime]:
    if not _SHIPPED:
        text = resources.files("geosim.data").joinpath("runtimes.toml").read_text()
        for name, table in tomllib.loads(text).items():
            _SHIPPED[name] = runtime_from_table(name, table)
    return _SHIPPED


def runtime_names() -> tuple[str, ...]:
    return tuple(shipped_runtimes())


def check_runtime_name(name, source: str = "--runtime", key: str | None = None, params: Params | None = None) -> str:
    """A shipped runtime's name, or one a parameters file added ([runtime.NAME] with its description)."""
    if params is not None and name in (params.runtimes or {}):
        return name
    if name not in shipped_runtimes():
        raise GeosimError(f"unknown runtime {name!r} (known: {', '.join(runtime_names())})", source=source, key=key)
    return name


def runtime_of(workload: Workload, params: Params | None = None) -> Runtime:
    """The workload's runtime, as a fit changed it (Params.runtimes) or as shipped."""
    name = getattr(workload, "runtime", DEFAULT_RUNTIME)
    if params is not None and params.runtimes:
        found = params.runtimes.get(name)
        if found is not None:
            return found
    return shipped_runtimes()[check_runtime_name(name, key="workload.runtime", params=params)]


def with_runtime(params: Params, runtime: Runtime) -> Params:
    """Params whose runtime of that name is this one (what a fit of a runtime's costs moves)."""
    return replace(params, runtimes={**(params.runtimes or {}), runtime.name: runtime})
