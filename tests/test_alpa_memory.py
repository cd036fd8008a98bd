"""Alpa 0.2.3's memory (issue 41 item 7): the buffers its code allocates beyond TrainState's layout, by hand,
and Algorithm 1 on predicted probes never choosing a cell whose peak may not fit (the study's gpt2L cells)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from geosim.inputs.params import load_params
from geosim.inputs.runtime import shipped_runtimes
from geosim.inputs.scenario import get_model, load_scenario
from geosim.sim import memory_layout as ml
from geosim.inputs.specs import Workload
from geosim.studies.select import PredictedProbes, algorithm1

STUDY = ml.LayoutOptions(precision="fp16")
ALPA = replace(STUDY, alpa_023=True)


def test_the_alpa_runtime_lays_memory_out_as_alpa_0_2_3():
    runtime, params = shipped_runtimes()["alpa"], load_params()
    assert runtime.memory_layout == ml.ALPA_023_LAYOUT
    assert ml.options_for(Workload(), params, runtime).alpa_023
    assert not ml.options_for(Workload(), params, shipped_runtimes()["pytorch"]).alpa_023
    assert not ml.options_for(Workload(), params).alpa_023


def test_states_are_sixteen_bytes_a_parameter_as_trainstate_holds_them():
    sb = ml.state_bytes(ALPA)  # fp16 params 2, fp32 master 4, adamw's two fp32 moments 8, fp16 accumulators 2
    assert (sb.weights, sb.master, sb.optimizer, sb.gradients) == (2.0, 4.0, 8.0, 2.0)


def test_apply_grad_holds_one_more_gradient_where_the_activations_are_small():
    model = get_model("gpt2-medium")
    tiny = ml.data_parallel(model, 1e-6, 1024, ALPA)  # next to no activations: apply_grad is the peak
    n = model.num_params
    assert sum(tiny.values()) == pytest.approx(n * (16 + 2) + ALPA.workspace_bytes, rel=1e-4)
    study = ml.data_parallel(model, 1e-6, 1024, STUDY)
    assert sum(tiny.values()) - sum(study.values()) == pytest.approx(2 * n, rel=1e-3)
    # with a real microbatch the turn is the larger: nothing changes
    assert ml.data_parallel(model, 4, 1024, ALPA) == ml.data_parallel(model, 4, 1024, STUDY)


def test_a_later_stage_keeps_each_in_flight_microbatchs_received_input():
    model = get_model("gpt2-medium")
    args = (model, 4, 1024, 12)
    first = ml.pipeline_stage(*args, True, False, 2, 2, ALPA)
    assert first == ml.pipeline_stage(*args, True, False, 2, 2, STUDY)
    last, last_study = ml.pipeline_stage(*args, False, True, 2, 1, ALPA), ml.pipeline_stage(*args, False, True, 2, 1, STUDY)
    assert last["activations"] - last_study["activations"] == pytest.approx(1 * 4 * 1024 * 1024 * 2)


@pytest.mark.parametrize("slice_name", ["tacc-tacc", "utah-gpn", "utah-mass", "bris-star", "gat-amst"])
def test_algorithm1_never_chooses_gpt2L_data_on_one_vm(slice_name):
    """The study's gpt2L on one VM of two 24 GiB GPUs ran out of memory (it cut the model to 26 layers);
    the layout puts its peak within its error of what is usable, and such a probe counts as failed."""
    scenario = load_scenario(slice_name)
    probes = PredictedProbes(scenario.cluster, get_model("gpt2L"), scenario.workload(epochs=1), load_params())
    s = algorithm1(probes, "vm1", "vm2")
    assert s.probes["Td1"].status in ("may not fit", "out-of-memory") and s.probes["Td1"].tflops == 0
    assert s.label != "Data on vm1"
