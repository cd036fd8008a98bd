"""The study's technique selection (Algorithm 1 of arXiv:2602.02632), on pluggable probes.

A probe trains the model briefly with one technique on some VMs and returns the
average TFLOP/s per GPU, 0 when the run fails. Where the number comes from is a
ProbeSource: the simulator (geosim.studies.select.PredictedProbes), run records
(MeasuredProbes) or real runs (LiveProbes). Algorithm 1 itself
only sees the numbers, so it is written once, exactly as the reference restates it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Protocol

from geosim.base.errors import GeosimError
from geosim.inputs.case import DEFAULT_NETWORK, Case
from geosim.predict import predict
from geosim.inputs.records import RunRecord
from geosim.inputs.specs import Cluster, Model, Params, Workload
from geosim.techniques import data, is_pipelined, label, option_kind, pipeshard, shard, zero2

DEFAULT_DELTA = 0.1
NO_CHOICE = "none: more GPU memory needed"
# the study's algorithm names the study's techniques (through their modules' NAME constants)
DATA, ZERO2, SHARD, PIPESHARD = data.NAME, zero2.NAME, shard.NAME, pipeshard.NAME


@dataclass(frozen=True)
class Probe:
    technique: str
    hosts: tuple[str, ...]
    tflops: float  # per GPU; 0 when the run failed, as the algorithm requires
    status: str  # ok | out-of-memory | infeasible | failed | interrupted
    detail: str = ""  # why it failed, or where the figure came from


class MissingProbe(GeosimError):
    """A measured probe that no record holds; carries the command that would measure it."""

    def __init__(self, technique: str, hosts: tuple[str, ...], command: str):
        self.technique, self.hosts, self.command = technique, hosts, command
        super().__init__(f"no record of {technique} on {'+'.join(hosts)}")


class ProbeSource(Protocol):
    kind: str  # predicted | measured | live

    def probe(self, technique: str, hosts: tuple[str, ...]) -> Probe: ...


@dataclass
class Selection:
    """What Algorithm 1 chose, the probe values it saw and the branch that decided."""

    technique: str | None  # None: no technique fits ("none: more GPU memory needed")
    hosts: tuple[str, ...]
    branch: str  # pipeshard | single-vm | zero2 | none
    reason: str
    probes: dict[str, Probe]  # Tp, Td1, Ts1, Td2, Ts2 and, when probed, Tz2
    tz: float
    delta: float
    source: str
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        if self.technique is None:
            return NO_CHOICE
        return f"{label(self.technique)} on {'+'.join(self.hosts)}"

    def to_dict(self) -> dict:
        doc = asdict(self)
        doc["label"] = self.label
        return doc


def _ratio(a: float, b: float) -> str:
    return f"{(a - b) / b:+.3f}" if b > 0 else "undefined (divisor 0)"


def algorithm1(source: ProbeSource, *vms: str, delta: float = DEFAULT_DELTA) -> Selection:
    """Algorithm 1, step for step, on any number of VMs (docs/guide/select-plan.md, "Algorithm 1 past
    two VMs"). On two it is the study's exactly: probes Tp (Pipeshard on V1+V2, a stage per VM), Td_i
    and Ts_i (Data and Shard on each VM alone), Tz = their maximum; Pipeshard if it beats Tz by more than
    delta, the best single VM if Tz beats Tp by more than delta, else ZeRO2 on all if it runs, else none.
    On N VMs the same steps with Tp a stage per VM over all N, i = 1..N, ZeRO2 on all N; ties go to the
    lower-numbered VM and to Data (>=), as in the restatement. On one VM there is no pipeline across VMs
    (Tp is not probed): the better of Data and Shard on it, else ZeRO2 on it, else none."""
    if vms and not isinstance(vms[-1], str):  # the study's form: algorithm1(source, v1, v2, delta)
        *vms, delta = vms
    if not vms:
        raise GeosimError("Algorithm 1 needs at least one VM", source="--hosts")
    if not 0 < delta <= 1:
        raise GeosimError(f"must be in (0, 1], got {delta:g}", source="--delta")
    everyone = tuple(vms)
    wanted = {"Tp": (PIPESHARD, everyone)} if len(vms) > 1 else {}
    for i, vm in enumerate(vms, start=1):
        wanted[f"Td{i}"] = (DATA, (vm,))
        wanted[f"Ts{i}"] = (SHARD, (vm,))
    probes, missing = {}, []
    for name, (technique, hosts) in wanted.items():
        try:
            probes[name] = source.probe(technique, hosts)
        except MissingProbe as exc:  # collect them all: one error listing every run still needed
            missing.append(exc)
    if missing:
        raise _missing_error(missing)
    t = {name: p.tflops for name, p in probes.items()}
    singles = [(t[f"Td{i}"], t[f"Ts{i}"]) for i in range(1, len(vms) + 1)]
    tz = max(max(pair) for pair in singles)
    pick = dict(probes=probes, tz=tz, delta=delta, source=source.kind)
    # the first VM whose better single-VM probe is Tz, and its better technique (Data on a tie)
    i_best = next(i for i, pair in enumerate(singles) if max(pair) >= tz)
    single = (DATA if singles[i_best][0] >= singles[i_best][1] else SHARD), (vms[i_best],)
    if len(vms) == 1:
        if tz > 0:
            return Selection(*single, "single-vm", f"one VM: the better of Data and Shard on it (Tz = {tz:.3g})",
                             **pick)
        probes["Tz2"] = tz2 = _one(source, ZERO2, everyone)
        if tz2.tflops > 0:
            return Selection(ZERO2, everyone, ZERO2, "one VM: Data and Shard fail (Tz = 0); Tz2 > 0", **pick)
        return Selection(None, (), "none", "one VM: every probe failed (Tz = 0, Tz2 = 0)", **pick)
    tp = t["Tp"]
    gain_p = f"(Tp - Tz) / Tz = {_ratio(tp, tz)}"
    gain_z = f"(Tz - Tp) / Tp = {_ratio(tz, tp)}"

    if tz > 0 and (tp - tz) / tz > delta:
        return Selection(PIPESHARD, everyone, PIPESHARD, f"{gain_p} > delta {delta:g}", **pick)
    if tp > 0 and (tz - tp) / tp > delta:
        reason = f"{gain_z} > delta {delta:g}: one VM beats the pipeline"
        return Selection(*single, "single-vm", reason, **pick)

    if tz == 0 and tp == 0:
        why = "Tp = 0 and Tz = 0 (every probe failed)"
    elif tz == 0:
        why = f"Tz = 0 (every single-VM probe failed), so the Pipeshard test needs Tz > 0; {gain_z} <= delta"
    elif tp == 0:
        why = f"Tp = 0 (Pipeshard failed), so the single-VM test needs Tp > 0; {gain_p} <= delta"
    else:
        why = f"|gap| within delta {delta:g}: {gain_p}, {gain_z}"
    probes["Tz2"] = tz2 = _one(source, ZERO2, everyone)
    notes = []
    if tz == 0 < tp:
        notes.append("Pipeshard ran (Tp > 0) but Algorithm 1 returns it only when some single-VM probe ran too")
    if tp == 0 < tz:
        notes.append("a single VM ran (Tz > 0) but Algorithm 1 returns one only when Pipeshard ran too")
    if tz2.tflops > 0:
        return Selection(ZERO2, everyone, ZERO2, f"{why}; Tz2 > 0", notes=notes, **pick)
    return Selection(None, (), "none", f"{why}; Tz2 = 0", notes=notes, **pick)


def algorithm1_kinds(*vms: str) -> set[str]:
    """The technique-and-VMs choices Algorithm 1 can return."""
    everyone = tuple(vms)
    return ({option_kind(PIPESHARD, everyone), option_kind(ZERO2, everyone)} if len(vms) > 1
            else {option_kind(ZERO2, everyone)}) | {option_kind(t, (v,)) for t in (DATA, SHARD) for v in vms}


def _one(source: ProbeSource, technique: str, hosts: tuple[str, ...]) -> Probe:
    try:
        return source.probe(technique, hosts)
    except MissingProbe as exc:
        raise _missing_error([exc]) from None


def _missing_error(missing: list[MissingProbe]) -> GeosimError:
    runs = "; ".join(f"{m.technique} on {'+'.join(m.hosts)}: {m.command}" for m in missing)
    return GeosimError(f"missing probe(s) for Algorithm 1, measure them first: {runs}", source="--records")


# -- probe sources ---------------------------------------------------------------------------


# A predicted probe whose memory "may not fit" (its peak within the memory model's error of what is usable)
# counts as a failed probe, as an out-of-memory run does in Algorithm 1: the error is one-sided where it was
# measured (Alpa's peaks run 17-40% above the layout on an A100 log, issue 41), and the study's probes that
# the layout puts there (gpt2L's Data on one VM of 24 GiB GPUs) ran out of memory.
MAY_NOT_FIT_STATUS = "may not fit"


class PredictedProbes:
    """Probes the simulator predicts: steady-state TFLOP/s per GPU, 0 when it predicts a failure or a peak
    that may not fit."""

    kind = "predicted"

    def __init__(self, cluster: Cluster, model: Model, workload: Workload, params: Params,
                 network: str = DEFAULT_NETWORK):
        self.cluster, self.model, self.workload, self.params = cluster, model, workload, params
        self.network = network  # the network backend the probes are predicted on
        self._twins: dict[tuple, tuple[str, ...]] = {}  # (technique, a VM alone's hardware) -> the VM probed

    def probe(self, technique: str, hosts: tuple[str, ...]) -> Probe:
        if len(hosts) == 1:  # a VM alone crosses no link: VMs of the same GPUs give the same probe
            twin = self._twins.setdefault((technique, _alone(self.cluster, hosts[0])), hosts)
            if twin != hosts:
                same = self.probe(technique, twin)
                return replace(same, hosts=hosts)
        p = predict(Case(self.cluster, self.model, self.workload, self.params, self.network), technique, hosts=hosts)
        if not p.ok:
            return Probe(technique, hosts, 0.0, p.status, p.reason or "")
        if p.memory_verdict == MAY_NOT_FIT_STATUS:
            return Probe(technique, hosts, 0.0, MAY_NOT_FIT_STATUS,
                         f"counted as failed ({p.tflops_per_gpu:.3f} TFLOP/s if it fits): "
                         + (p.memory_note or "").removeprefix(MAY_NOT_FIT_STATUS + ": "))
        return Probe(technique, hosts, p.tflops_per_gpu, "ok", p.description)


def _alone(cluster: Cluster, name: str):
    """What a VM alone is predicted from: its GPUs, how they are joined and its NICs, not its name or site."""
    host = cluster.host(name)
    return repr(replace(host, name="", site=""))


class MeasuredProbes:
    """Probes read from run records: the latest record of the same scenario, model, technique and VMs."""

    kind = "measured"

    def __init__(self, records: list[RunRecord], cluster: Cluster, scenario: str, model: Model,
                 workload: Workload, path: str, record_hint: str | None = None):
        self.cluster, self.model, self.workload, self.path = cluster, model, workload, path
        self.record_hint = record_hint or path  # the file the suggested `geosim live run` should write
        names = {scenario.lower(), cluster.name.lower(), (cluster.reference_slice or "").lower()}
        self.records = [r for r in records if r.model == model.name and _scenario_of(r).lower() in names]
        self.all_hosts = frozenset(h.name for h in cluster.hosts)
        self.scenario = scenario

    def find(self, technique: str, hosts: tuple[str, ...]) -> RunRecord | None:
        same = [r for r in self.records if r.technique == technique
                and frozenset(r.hosts or self.all_hosts) == frozenset(hosts)]
        return max(same, key=lambda r: r.when) if same else None

    def probe(self, technique: str, hosts: tuple[str, ...]) -> Probe:
        record = self.find(technique, hosts)
        if record is None:
            raise MissingProbe(technique, hosts, live_command(technique, self.model.name, hosts, self.workload.epochs,
                                                              self.scenario, self.record_hint))
        where = f"record {record.run_id} ({record.source}, {record.when})"
        if record.status != "ok":
            return Probe(technique, hosts, 0.0, record.status, f"{where}: {record.error or record.status}")
        tflops = record_tflops(record, self.model, self.workload, self.cluster.subset(hosts).num_gpus)
        if tflops is None:
            raise GeosimError(f"record {record.run_id} ({technique} on {'+'.join(hosts)}) has no TFLOP/s "
                              "or time per iteration", source=self.path)
        return Probe(technique, hosts, tflops, "ok", where)


def _scenario_of(record: RunRecord) -> str:
    if record.scenario:
        return record.scenario.rsplit("/", 1)[-1].removesuffix(".toml")
    return str((record.cluster or {}).get("name", ""))


def record_tflops(record: RunRecord, model: Model, workload: Workload, gpus: int) -> float | None:
    """The record's TFLOP/s, else derived from its time per iteration (Alpa's formula, its own batch)."""
    if "tflops_per_gpu" in record.measured:
        return float(record.measured["tflops_per_gpu"])
    batch = record.workload.get("global_batch", workload.global_batch)
    seq = record.workload.get("seq_len", workload.seq_len)
    step = record.measured.get("time_per_iteration_s")
    if step:
        return model.alpa_flops_per_iteration(batch, seq) / step / gpus / 1e12
    total, epochs = record.measured.get("total_time_s"), record.workload.get("epochs")
    if total and epochs:  # a whole run's time (start-up included), over the tokens it trained on
        tokens = epochs * record.workload.get("tokens_per_epoch", workload.tokens_per_epoch)
        return model.alpa_flops_per_iteration(batch, seq) / (batch * seq) * tokens / total / gpus / 1e12
    return None


def live_command(technique: str, model: str, hosts: tuple[str, ...], epochs: int, scenario: str, path: str) -> str:
    # `geosim live run` records no VM names yet, so say where to run and what the record must hold
    return (f"`geosim live run --technique {technique} --model {model} --epochs {epochs} --scenario {scenario} "
            f"--records-out {path}` on {'+'.join(hosts)} alone, the record's hosts set to {list(hosts)}")


class LiveProbes:
    """Probes that really train, through `geosim live run` in a fresh process per probe.

    A process each, because JAX fixes its device count when it starts. On one machine
    the VMs become CPU devices: a one-VM probe gets `devices_per_vm` devices and the
    V1+V2 probe twice as many (Pipeshard then puts one stage on each half), so V1 and
    V2 are the same hardware here and Td1 ~ Td2. `extra_args` go to `geosim live run`
    as they are.
    """

    kind = "live"

    def __init__(self, model: str, global_batch: int, microbatches: int, *, epochs: int | None = None,
                 steps: int | None = None, devices_per_vm: int = 2, record: str | None = None,
                 extra_args: tuple[str, ...] = (), log=None):
        self.model, self.batch, self.microbatches = model, global_batch, microbatches
        self.epochs, self.steps, self.devices_per_vm = epochs, steps, devices_per_vm
        self.record, self.extra_args, self.log = record, tuple(extra_args), log

    def command(self, technique: str, hosts: tuple[str, ...]) -> list[str]:
        import sys

        cmd = [sys.executable, "-m", "geosim", "live", "run", "--technique", technique, "--model", self.model,
               "--global-batch", str(self.batch), "--gpus-per-host", str(self.devices_per_vm * len(hosts)), "--json"]
        cmd += ["--steps", str(self.steps)] if self.steps else ["--epochs", str(self.epochs or 1)]
        if is_pipelined(technique):
            cmd += ["--microbatches", str(self.microbatches)]
        if self.record:
            cmd += ["--records-out", self.record]
        return cmd + list(self.extra_args)

    def probe(self, technique: str, hosts: tuple[str, ...]) -> Probe:
        import json
        import subprocess

        cmd = self.command(technique, hosts)
        if self.log:
            self.log(f"probe {technique} on {'+'.join(hosts)}: {' '.join(cmd[1:])}")
        done = subprocess.run(cmd, capture_output=True, text=True)
        try:
            doc = json.loads(done.stdout)
        except json.JSONDecodeError:  # no record at all: the command itself was wrong, not the training
            last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise GeosimError(f"live probe {technique} on {'+'.join(hosts)} produced no record: {last}",
                              source="--live") from None
        where = f"live run {doc.get('run_id', '?')}"
        if doc.get("status") != "ok":
            return Probe(technique, hosts, 0.0, doc.get("status", "failed"), f"{where}: {doc.get('error', '')}")
        return Probe(technique, hosts, float(doc.get("measured", {}).get("tflops_per_gpu", 0.0)), "ok", where)
