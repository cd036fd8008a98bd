"""A cluster written with `scale:` and the same cluster written as a scenario file take the same road
(the same ranks simulated, the same events) and give the same answers (issue 47 item 3). A one-site
`scale:` cluster is drawn on its LAN alone, as the file's hosts share their site's LAN (it once joined
its first VM to each other by a 20 ms link of its own: docs/results/2026-11-28-every-row.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from geosim.inputs.case import Case
from geosim.inputs.params import default_params
from geosim.predict import predict
from geosim.inputs.scale import scale_scenario
from geosim.inputs.scenario import get_model, load_scenario
from geosim.inputs.specs import Workload
from geosim.techniques import layout_options
from geosim.base.units import s_to_ms


def as_file(name: str, tmp_path: Path) -> Path:
    """The generated cluster written out as a scenario file, host by host and link by link."""
    cluster = scale_scenario(name).cluster
    lines = [f'name = "{cluster.name}"']
    for host in cluster.hosts:
        gpus = ", ".join(f'"{g.name}"' for g in host.gpus)
        lines += ["[[hosts]]", f'name = "{host.name}"', f'site = "{host.site}"', f"gpus = [{gpus}]",
                  f'intra_host = "{host.intra_host}"', f'nic = "{host.nic}"', f'transport = "{host.transport}"']
        if host.nic_bps is not None:
            lines.append(f"nic_gbps = {host.nic_bps / 1e9!r}")
    for link in cluster.links:
        lines += ["[[links]]", f'between = ["{link.a}", "{link.b}"]', f"rtt_ms = {s_to_ms(link.rtt_s)!r}",
                  f"bandwidth_gbps = {link.bandwidth_bps / 1e9!r}", f'transport = "{link.transport}"']
    path = tmp_path / "twin.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("name,technique,options", [
    ("scale:2x2x4:H100:nvlink", "shard", None),
    ("scale:2x2x4:H100:nvlink", "data", None),
    ("scale:1x3x4:H100", "data", None),
    ("scale:1x4x4:H100:nvlink", "pipeshard", dict(tensor=4, pipeline=2, data=2)),
])
def test_scale_and_its_file_take_the_same_road(name, technique, options, tmp_path):
    generated = scale_scenario(name).cluster
    written = load_scenario(as_file(name, tmp_path)).cluster
    assert written.hosts == generated.hosts and written.links == generated.links
    model, workload, params = get_model("gpt2-xl"), Workload(global_batch=192, microbatches=4), default_params()
    answers = []
    for cluster in (generated, written):
        case = Case(cluster, model, workload, params)
        layout = None
        if options is not None:  # the layout flags' own translation (geosim.techniques.layout_options)
            layout = layout_options(technique, case, tuple(h.name for h in cluster.hosts), **options)
        answer = predict(case, technique, options=layout).to_dict()
        answer.pop("wall_s")
        answer.pop("scenario")
        answers.append(answer)
    assert answers[0]["status"] == "ok"
    assert answers[0] == answers[1]  # the same figures, and the same simulated events: the same road

