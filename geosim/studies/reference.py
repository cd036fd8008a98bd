"""The study's measurements (arXiv:2602.02632), shipped as geosim/data/fabric-slm-2026.toml."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from geosim.inputs.records import RunRecord
from geosim.predict import Prediction
from geosim.inputs.specs import Cluster

REFERENCE_FILE = "fabric-slm-2026.toml"
STUDY_TECHNIQUES = {"Data": "data", "ZeRO2": "zero2", "Shard": "shard", "Pipeshard": "pipeshard"}
STUDY_EPOCHS = 20
STUDY_MODEL = "gpt2m"  # Table II and the quoted TFLOP/s are gpt2m on all 4 GPUs of a slice


@dataclass(frozen=True)
class Measurement:
    slice: str  # the study's slice name, e.g. "UTAH-GPN"
    technique: str  # geosim's technique name
    model: str
    total_time_s: float | None  # 20 epochs, wall clock
    tflops_per_gpu: float | None

    @property
    def scenario(self) -> str:
        """The built-in scenario file holding this slice."""
        return self.slice.lower()


@cache
def reference_doc() -> dict:
    return tomllib.loads(resources.files("geosim.data").joinpath(REFERENCE_FILE).read_text())


@cache
def study_measurements() -> tuple[Measurement, ...]:
    doc = reference_doc()
    table = doc["table2_gpt2m_4gpu_minutes"]
    tflops = {(row["slice"], STUDY_TECHNIQUES[k]): v for row in doc["tflops_gpt2m_4gpu"]
              for k, v in row.items() if k in STUDY_TECHNIQUES}
    out = []
    for column, slice_name in enumerate(table["columns"]):
        for study_name, technique in STUDY_TECHNIQUES.items():
            out.append(Measurement(slice_name, technique, STUDY_MODEL, table[study_name][column] * 60.0,
                                   tflops.get((slice_name, technique))))
    return tuple(out)


@dataclass(frozen=True)
class SingleVmMeasurement:
    """gpt2m on the two GPUs of one VM (no WAN traffic), quoted in the study's text."""

    slice: str
    vm: str
    technique: str
    total_time_s: float | None
    tflops_per_gpu: float | None

    @property
    def scenario(self) -> str:
        return self.slice.lower()


@cache
def single_vm_measurements() -> tuple[SingleVmMeasurement, ...]:
    out = []
    for row in reference_doc().get("single_vm_gpt2m", []):
        minutes, tflops = row.get("minutes", {}), row.get("tflops_per_gpu", {})
        for study_name in dict.fromkeys([*minutes, *tflops]):
            out.append(SingleVmMeasurement(row["slice"], row["vm"], STUDY_TECHNIQUES[study_name],
                                           minutes[study_name] * 60.0 if study_name in minutes else None,
                                           tflops.get(study_name)))
    return tuple(out)


def measured_for(slice_name: str | None, technique: str, model: str, num_gpus: int) -> Measurement | None:
    """The study's figure for the same case (same slice, technique and model, all 4 GPUs), if any."""
    if slice_name is None or num_gpus != 4:
        return None
    for m in study_measurements():
        if m.slice == slice_name and m.technique == technique and m.model == model:
            return m
    return None


def slice_rtt_ms() -> dict[str, float]:
    return {s["name"]: s["rtt_ms"] for s in reference_doc()["slices"]}


def study_records(single_vm: bool = True) -> list[RunRecord]:
    """Table II of arXiv:2602.02632 (gpt2m on all 4 GPUs of each slice, 20 epochs) and the quoted TFLOP/s,
    then (single_vm) the gpt2m runs on one VM's two GPUs the text quotes: compute-bound, they are what
    pins the kernel timer (Table II's runs are paced by the WAN)."""
    records = []
    for m in study_measurements():
        measured = {"total_time_s": m.total_time_s}
        if m.tflops_per_gpu is not None:
            measured["tflops_per_gpu"] = m.tflops_per_gpu
        records.append(RunRecord(
            technique=m.technique, model=m.model, status="ok", scenario=m.scenario,
            workload={"epochs": STUDY_EPOCHS, "seq_len": 1024}, measured=measured, source="fabric-slm-2026",
            backend="alpa", collective_impl="nccl", note=f"arXiv:2602.02632 Table II, {m.slice}",
            when="2026-02-01T00:00:00+00:00", software={"alpa": "source build", "nccl": "2.15.1", "ray": "2.1.0"},
            run_id=f"fabric-slm-2026-{m.scenario}-{m.technique}",
        ))
    for m in single_vm_measurements() if single_vm else ():
        measured = {k: v for k, v in (("total_time_s", m.total_time_s), ("tflops_per_gpu", m.tflops_per_gpu))
                    if v is not None}
        records.append(RunRecord(
            technique=m.technique, model=STUDY_MODEL, status="ok", scenario=m.scenario, hosts=[m.vm],
            workload={"epochs": STUDY_EPOCHS, "seq_len": 1024}, measured=measured, source="fabric-slm-2026",
            backend="alpa", collective_impl="nccl", note=f"arXiv:2602.02632 text, {m.slice} {m.vm} alone",
            when="2026-02-01T00:00:00+00:00", software={"alpa": "source build", "nccl": "2.15.1", "ray": "2.1.0"},
            run_id=f"fabric-slm-2026-{m.scenario}-{m.vm}-{m.technique}",
        ))
    return records


def attach_measurement(result: Prediction, cluster: Cluster) -> Prediction:
    """Put the study's figure for the same case beside the prediction, scaled to its epochs."""
    m = measured_for(cluster.reference_slice, result.technique, result.model, len(result.gpus))
    if m is not None:
        result.measured = {
            "source": "arXiv:2602.02632 Table II",
            "total_time_s_20_epochs": m.total_time_s,
            "time_per_epoch_s": m.total_time_s / STUDY_EPOCHS,
            "tflops_per_gpu": m.tflops_per_gpu,
        }
    return result
