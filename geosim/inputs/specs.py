"""Plain data: the hardware, the model, the workload and the tunable parameters.

Nothing here computes time. The techniques read these specs and emit schedules;
the engine runs schedules. Keeping the three apart (as Calculon does) is what lets
calibration change a parameter without touching a technique.
"""

from __future__ import annotations

from functools import cached_property
from dataclasses import dataclass, field, replace

from geosim.base.errors import GeosimError
from geosim.base.generations import generation
from geosim.inputs.model_shape import Model  # noqa: F401 -- the model's shape and counts, where the specs' users find it
from geosim.base.parameters import missing_value
from geosim.base.units import GIB, MIB  # noqa: F401 -- where the specs' users have always found them


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gib: float
    memory_bandwidth_gbs: float
    fp32_tflops: float
    fp16_tensor_tflops: float
    pcie_gen: int
    bf16_tensor_tflops: float | None = None  # None: no bf16 (Turing)
    tf32_tensor_tflops: float | None = None  # None: no TF32 tensor cores (before Ampere)
    architecture: str = "unknown"  # generation, lower case (turing, ampere, ...): the kernel timer's overrides
    tdp_w: float | None = None  # board power: caps a power-dense card's sustained tensor rate (sim/compute.py)
    # the least tensor TFLOP/s per watt of its generation's cards in the catalog (geosim.inputs.scenario sets it):
    # what a power-dense card of that generation sustains per watt of tdp_w; None: no cap
    generation_tflops_per_watt: float | None = None
    # NVLink's line rate per direction, GB/s (a datasheet's bidirectional figure halved); None: no NVLink
    # (the card's hosts reach each other over PCIe, or the parameters' host.nvlink_gbps where a host says nvlink)
    nvlink_gbs: float | None = None

    def peak_tflops(self, precision: str, tf32: bool = False) -> float:
        """The datasheet peak a matmul of this precision runs at; fp32 on TF32 tensor cores where the
        runtime allows it (`tf32`) and the GPU has them."""
        if precision == "fp32":
            return self.tf32_tensor_tflops if tf32 and self.tf32_tensor_tflops else self.fp32_tflops
        if precision == "bf16":
            return self.bf16_tensor_tflops or self.fp32_tflops
        return self.fp16_tensor_tflops


TRANSPORTS = ("tcp", "rdma")  # what carries a host's or a link's traffic between hosts (geosim/sim/network/)


@dataclass(frozen=True)
class Host:
    """A VM: its GPUs talk over PCIe inside it (no NVLink on FABRIC VMs)."""

    name: str
    site: str
    gpus: tuple[GPU, ...]
    intra_host: str = "pcie"  # "pcie" or "nvlink"
    # "shared": the host's GPUs share its network links; "per-gpu": each GPU has its own NIC and
    # its own lane of every link leaving or entering the host (GPU clusters with a NIC per GPU)
    nic: str = "shared"
    # how the host reaches the other hosts of its site: "tcp" (sockets: FABRIC's VMs, Ethernet without
    # RDMA) or "rdma" (InfiniBand or RoCE: NCCL's IB transport, no socket, no TCP window)
    transport: str = "tcp"
    nic_bps: float | None = None  # each NIC's rate, bit/s (a rail); None: the parameters' host.lan_bandwidth_gbps
    # the hosts' TCP window (Linux autotunes up to tcp_rmem's maximum, half of it advertised); None: the
    # parameters' transport.window_mib (FABRIC's fitted figure, the study's slices')
    tcp_window_bytes: float | None = None
    # where tcp_window_bytes is None: True for a host a scenario writes that is no FABRIC VM (its site is not
    # one of geosim/data/fabric-sites.toml's): its kernel's autotuning limit, [transport] kernel_window_mib;
    # False (FABRIC's VMs, and hosts built in code): [transport] window_mib, the study's fitted figure
    kernel_window: bool = False


# Bytes a TCP segment carries on a link of this MTU, and what it costs on the wire: 20 B of IPv4,
# 20 B of TCP and 12 B of its timestamp option (Linux's default) inside the MTU, 14 B of Ethernet
# header outside it, all counted by a shaper that measures frames (Linux tbf counts every
# segment's headers, also of a TSO super-frame: qdisc_pkt_len_init).
TCP_IP_HEADER_BYTES = 52
ETHERNET_HEADER_BYTES = 14


@dataclass(frozen=True)
class Shaper:
    """A link whose capacity is a token bucket (Linux tbf, a provider's policer or shaper) rather
    than a line: frames leave at `Link.bandwidth_bps` on average, up to `burst_bytes` at once
    after the bucket has filled while idle, and a queue of `queue_s` at the rate before frames
    are dropped. The rate counts frames, headers included, so TCP's goodput is the rate x
    payload / frame (0.956 at a 1500-byte MTU)."""

    burst_bytes: float
    queue_s: float = 0.05
    mtu: int = 1500
    # the bucket is the sending host's own qdisc (tc on its egress, as the WAN emulator shapes): TCP small
    # queues hold the sender back before the queue overflows, so the bucket never drops a local flow
    at_sender: bool = False

    @property
    def goodput_fraction(self) -> float:
        return (self.mtu - TCP_IP_HEADER_BYTES) / (self.mtu + ETHERNET_HEADER_BYTES)


@dataclass(frozen=True)
class Link:
    """A network link between two hosts or two sites, both directions alike.

    window_bytes/streams/loss override the transport defaults of Params where a
    slice's hosts are tuned differently (or where calibration fitted them).
    """

    a: str
    b: str
    rtt_s: float
    bandwidth_bps: float  # bits per second
    window_bytes: float | None = None
    streams: int | None = None
    step_rtts: float | None = None  # NCCL flow-control round trips per collective step
    rtt_estimated: bool = False  # rtt_s estimated from the sites' distance (geosim.base.sites), not measured
    shaper: Shaper | None = None  # a rate-limited link: bandwidth_bps is a token bucket's rate
    loss: float = 0.0  # fraction of segments lost at random (each direction): TCP's response function prices it
    # other traffic at the path's bottleneck, as that many loss-based flows of the same round trip (the public
    # internet's): a connection's N streams get N / (N + competing_flows) of the link's rate (TCP's fair share)
    competing_flows: float = 0.0
    # a path whose rate varies (an iperf profile, a provider's measurements): samples of its bandwidth in bit/s.
    # A prediction uses bandwidth_bps; `--draws` draws one sample per link per draw (geosim.studies.uncertainty)
    bandwidth_samples: tuple[float, ...] = ()
    transport: str = "tcp"  # "tcp" (sockets: WAN paths) or "rdma" (an InfiniBand or RoCE link inside a datacenter)

    @property
    def one_way_s(self) -> float:
        return self.rtt_s / 2


@dataclass(frozen=True)
class Cluster:
    name: str
    hosts: tuple[Host, ...]
    links: tuple[Link, ...]
    source: str = "<built-in>"
    reference_slice: str | None = None  # name of the study's slice, for measured figures

    def host(self, name: str) -> Host:
        return self._host_by_name[name]  # KeyError for a name the cluster does not have

    @cached_property
    def _host_by_name(self) -> dict[str, Host]:
        # the planner asks for hosts by name millions of times on a 128-host cluster: a scan each was 10% of it
        return {h.name: h for h in reversed(self.hosts)}  # reversed: the first of a repeated name wins, as a scan found

    def subset(self, host_names: tuple[str, ...]) -> "Cluster":
        keep = tuple(h for h in self.hosts if h.name in host_names)
        return replace(self, hosts=keep)

    @property
    def num_gpus(self) -> int:
        return sum(len(h.gpus) for h in self.hosts)


@dataclass(frozen=True)
class Workload:
    """What is trained. The study reported neither batch nor microbatches; see README."""

    tokens_per_epoch: int = 650_000
    seq_len: int = 1024
    global_batch: int = 32  # sequences per iteration
    microbatches: int = 4  # Alpa's num_micro_batches: pipeline microbatches, gradient accumulation for the others
    precision: str = "fp16"  # fp16 | bf16 | fp32 (mixed precision keeps fp32 master weights)
    epochs: int = 20
    checkpointing: bool = False
    runtime: str = "alpa"  # the software stack and its fixed costs (geosim/inputs/runtime.py, geosim/data/runtimes.toml)

    @property
    def tokens_per_iteration(self) -> int:
        return self.global_batch * self.seq_len

    @property
    def iterations_per_epoch(self) -> int:
        # drop_last, like the Flax/Alpa GPT-2 data loaders the study ran
        return max(1, self.tokens_per_epoch // self.tokens_per_iteration)

    @property
    def bytes_per_value(self) -> int:
        return 4 if self.precision == "fp32" else 2


@dataclass(frozen=True)
class ComputeConstants:
    """The op-level kernel timer's constants (geosim/sim/compute.py; each number declared once in
    geosim/base/parameters.py, its value the parameters file's or a runtime's measurement): the global ones with
    a GPU generation's own, or one device's where a runtime measured it (XLA:CPU on live's CPU devices).

    gemm_fraction: attainable fraction of the dense tensor (or fp32) peak for large GEMMs, so that one
        GPU's speed relative to another's comes from the catalog. The global value is fitted to the
        study (Alpa 2022 on Turing and the A30); a runtime's efficiency on a generation replaces it
        there (by_generation), as it does the other two.
    gemm_half_s: a GEMM's size-dependent saturation: one of F FLOPs reaches
        F / (F + R * gemm_half_s) of the large-GEMM rate R (tile and wave quantization, the
        ramp of filling and draining the SMs). A GEMM of R * gemm_half_s FLOPs runs at half rate.
    memory_fraction: attainable fraction of the memory bandwidth for streaming kernels.
    kernel_s: launch gap per kernel (XLA launches its fused kernels one by one).
    tf32: the runtime runs fp32 matmuls on TF32 tensor cores where the GPU has them (XLA's default).
    fused_attention: the runtime's attention never writes the S x S scores (flash attention, PyTorch's
        SDPA): their memory-bound passes go, and the backward recomputes the scores' product.
    by_generation: the workload's runtime's efficiency on each GPU generation it has an entry for, as
        (generation, (gemm_fraction, memory_fraction, gemm_half_s)) or (generation, None) where the entry is
        the global constants above (alpa's: fitted to the study on Turing and Ampere).
    estimate: the runtime's estimate for a GPU generation it has no entry for (None: the global constants).
        A device that is not a GPU of a known generation (a CPU share) runs with the global constants.
    """

    gemm_fraction: float
    gemm_half_s: float
    memory_fraction: float
    kernel_s: float
    tf32: bool = False
    fused_attention: bool = False
    by_generation: tuple[tuple[str, tuple[float, float, float] | None], ...] = ()
    estimate: tuple[float, float, float] | None = None

    def for_gpu(self, gpu: GPU) -> "ComputeConstants":
        """The constants one GPU runs with: the runtime's entry for its generation, else the runtime's estimate,
        else (a device of no GPU generation: a CPU share) the global ones."""
        entries = dict(self.by_generation)
        if gpu.architecture in entries:
            return self.with_fractions(entries[gpu.architecture])
        return self.with_fractions(self.estimate if generation(gpu.architecture) is not None else None)

    def with_fractions(self, fractions: tuple[float, float, float] | None) -> "ComputeConstants":
        """These constants with one generation's (gemm_fraction, memory_fraction, gemm_half_s); None: as they are."""
        if fractions is None:
            return replace(self, by_generation=(), estimate=None)
        gemm, memory, half = fractions
        return replace(self, gemm_fraction=gemm, memory_fraction=memory, gemm_half_s=half, by_generation=(),
                       estimate=None)


EFFICIENCY_KINDS = ("measured", "published", "estimated")


@dataclass(frozen=True)
class Efficiency:
    """What a runtime achieves on a GPU generation (geosim/data/runtimes.toml, [RUNTIME.efficiency.GENERATION]):
    the kernel timer's attainable fractions, and where they come from.

    gemm_fraction, memory_fraction, gemm_half_s: as ComputeConstants'; None: the parameters file's global
        [compute] constants (alpa's entries: what the study's fit found on Turing and Ampere).
    kind: measured (runs of this runtime on this generation; `refit` is the command that refits it),
        published (a public table, named in `source`) or estimated (`source` says from what).
    """

    generation: str
    kind: str
    source: str
    gemm_fraction: float | None = None
    memory_fraction: float | None = None
    gemm_half_s: float | None = None
    refit: str = ""

    @property
    def fractions(self) -> tuple[float, float, float] | None:
        if self.gemm_fraction is None:
            return None
        return (self.gemm_fraction, self.memory_fraction, self.gemm_half_s)


@dataclass(frozen=True)
class Params:
    """Every tunable constant of the simulator, in SI units (seconds, bytes, bit/s).

    Each is declared once, with its file key, unit, range, prior and source, in
    geosim/base/parameters.py (a network backend's in its module, a technique's in its Settings); the
    parameters file converts its units to these at the boundary.

    The shipped values live in one file, geosim/data/params-default.toml (read by
    geosim.inputs.params.load_params); a user's --params file overrides any subset.
    """

    # a flat achieved fraction of peak for a device the datasheet model does not describe (the CPU
    # devices of live runs); a GPU listed here bypasses the op-level kernel timer. Never fitted on the study.
    flat_fraction: dict[str, float]
    pcie_bps: dict[int, float]  # PCIe generation -> GPU-to-host rate, bit/s
    nvlink_bps: float
    intra_host_latency_s: float
    lan_rtt_s: float
    lan_bandwidth_bps: float
    collectives: dict[str, str]  # technique -> ring | tree | hierarchical
    combine_bytes: float  # XLA's collective combiner: gradient collectives go in buffers of at most this
    iteration_overhead_s: dict[str, float]
    startup_s: dict[str, float]
    workspace_bytes: float
    # No default here for a declared number: its one value is the shipped file's, read through its
    # declaration (geosim/base/parameters.py); tests/test_params_declared.py holds the code to that.
    compressed_activation_efficiency: float  # token efficiency factor of a compressed pipeline
    # the op-level kernel timer's global constants (geosim/sim/compute.py, docs/reference/params.md)
    gemm_fraction: float  # attainable fraction of the tensor peak for large GEMMs
    gemm_half_s: float  # a GEMM of (rate x this) FLOPs runs at half the large-GEMM rate
    memory_fraction: float  # attainable fraction of the memory bandwidth
    kernel_s: float  # launch gap per kernel
    usable_memory_fraction: float  # of a GPU's memory, what JAX's allocator preallocates
    memory_margin_fraction: float  # within this of the usable memory: "may not fit"
    source: str = "<built-in>"
    fitted_on: tuple[str, ...] = ()
    # (names, matrix): the covariance of the logs of the fitted global parameters, for parameter draws
    fitted_covariance: tuple = ()
    fit_warnings: tuple[str, ...] = ()  # what `calibrate fit` found suspicious ([fitted] warnings)
    # technique name -> its Settings (geosim/techniques/<name>.py); a technique not here runs
    # with its Settings' defaults
    technique_settings: dict[str, object] = field(default_factory=dict)
    # network backend name -> its Settings (geosim/sim/network/<model>.py: the TCP model's window, streams,
    # per-message costs, from the file's [transport] table); a model without constants has none
    networks: dict[str, object] = field(default_factory=dict)
    token_efficiency: dict[str, float] = field(default_factory=dict)  # Data's tokens / this technique's
    # what the workload's runtime decides (Runtime.applied_to sets them from runtimes.toml): its efficiency on
    # each GPU generation it has an entry for (generation -> Efficiency), its estimate for the others (an
    # Efficiency of kind "estimated"), whether fp32 matmuls run on TF32 tensor cores, whether attention is one
    # fused kernel that never writes the scores
    efficiency_by_generation: dict[str, "Efficiency"] = field(default_factory=dict)
    efficiency_estimate: "Efficiency | None" = None
    tf32_matmul: bool = False
    fused_attention: bool = False
    # runtime name -> geosim.inputs.runtime.Runtime where a fit changed a runtime's fixed costs; empty: as shipped
    # (geosim/data/runtimes.toml, declared there with their sources, not here)
    runtimes: dict[str, object] = field(default_factory=dict)
    # device name -> ComputeConstants: the op-level model's constants on a device whose speed
    # the workload's runtime measured (Runtime.applied_to sets it from runtimes.toml's device_compute, e.g.
    # XLA:CPU on live's CPU devices); a device not here runs with the global constants above
    device_compute: dict[str, object] = field(default_factory=dict)

    def settings(self, technique: str):
        """The technique's Settings, as the parameters file built them (geosim.inputs.params: every technique
        found, its Settings' defaults overridden by its [NAME] table)."""
        found = self.technique_settings.get(technique)
        if found is None:
            raise GeosimError(f"no settings for technique {technique!r} in these parameters (it was not found "
                              "when they were read)", source=self.source, key=technique)
        return found

    def with_settings(self, technique: str, **changes) -> "Params":
        updated = replace(self.settings(technique), **changes)
        return replace(self, technique_settings={**self.technique_settings, technique: updated})

    def network(self, model: str):
        """The network backend's Settings, as the parameters file built them (geosim.inputs.params: every model
        with a Settings, its values from its table, e.g. [transport] for tcp)."""
        found = self.networks.get(model)
        if found is None:
            raise GeosimError(f"no settings for network backend {model!r} in these parameters", source=self.source,
                              key=model)
        return found

    def with_network(self, model: str, **changes) -> "Params":
        """These parameters with some of a network backend's settings changed (SI units, its Settings' fields)."""
        return replace(self, networks={**self.networks, model: replace(self.network(model), **changes)})

    def for_technique(self, field: str, technique: str):
        """A technique-keyed table's value (iteration_overhead_s, startup_s, collectives, ...). A technique
        the table does not name (a new file, an older parameters file) gets what a typical technique has
        in this file: the median of the numbers the table holds (a fitted file's shared overhead), else
        the declared default (geosim/base/parameters.py); never a free 0 s that would let it win unearned."""
        table = getattr(self, field)
        found = table.get(technique)
        if found is not None:
            return found
        numbers = sorted(v for v in table.values() if isinstance(v, (int, float)) and not isinstance(v, bool))
        return numbers[len(numbers) // 2] if numbers else missing_value(field)

    def with_values(self, **changes) -> "Params":
        return replace(self, **changes)
