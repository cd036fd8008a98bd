"""Write the scenario files bench/bench_plan.py plans on (run it to regenerate them).

H100 SXM hosts (geosim/data/gpus.toml) of 8 GPUs joined by NVLink, at FABRIC sites joined
pairwise by 100 Gbit/s links whose RTT the scenario loader estimates from the sites'
distance (no rtt_ms given: geosim.base.sites). They are not built-in scenarios: the
default `geosim predict` never plans them.

    python bench/clusters/make_clusters.py
"""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

# spread over the continent, west to east, so RTTs range from a few to ~70 ms
SITES = ("UTAH", "STAR", "TACC", "WASH", "SEAT", "ATLA", "LOSA", "MASS",
         "DALL", "KANS", "NCSA", "MICH", "INDI", "SALT", "UCSD", "NEWY")
CLUSTERS = {"h100-2x1": (2, 1), "h100-4x4": (4, 4), "h100-8x16": (8, 16)}  # name: (sites, hosts per site)
# written with a host entry per site (`count`), not one per host: 1,280 hosts
COUNTED = {"h100-16x80": (16, 80)}  # issue 47's 10,240 GPUs over 16 sites
GPUS_PER_HOST = 8


def scenario(name: str, sites: int, hosts: int) -> str:
    lines = [f"# {sites} sites x {hosts} host(s) x {GPUS_PER_HOST} H100 ({sites * hosts * GPUS_PER_HOST} GPUs): "
             "written by bench/clusters/make_clusters.py",
             f'name = "{name}"', ""]
    for site in SITES[:sites]:
        for h in range(hosts):
            lines += ["[[hosts]]", f'name = "{site.lower()}-{h}"', f'site = "{site}"',
                      "gpus = [" + ", ".join(['"H100"'] * GPUS_PER_HOST) + "]", 'intra_host = "nvlink"', ""]
    return "\n".join(lines + links(sites))


def counted(name: str, sites: int, hosts: int) -> str:
    lines = [f"# {sites} sites x {hosts} hosts x {GPUS_PER_HOST} H100 ({sites * hosts * GPUS_PER_HOST:,} GPUs): "
             "written by bench/clusters/make_clusters.py",
             f'name = "{name}"', ""]
    for site in SITES[:sites]:
        lines += ["[[hosts]]", f'name = "{site.lower()}-[0-{hosts - 1}]"', f"count = {hosts}", f'site = "{site}"',
                  "gpus = [" + ", ".join(['"H100"'] * GPUS_PER_HOST) + "]", 'intra_host = "nvlink"', ""]
    return "\n".join(lines + links(sites))


def links(sites: int) -> list[str]:
    lines = []
    for a, b in combinations(SITES[:sites], 2):
        lines += ["[[links]]", f'between = ["{a}", "{b}"]', "bandwidth_gbps = 100.0  # RTT estimated from distance", ""]
    return lines


def main() -> None:
    here = Path(__file__).resolve().parent
    for name, (sites, hosts) in CLUSTERS.items():
        (here / f"{name}.toml").write_text(scenario(name, sites, hosts))
    for name, (sites, hosts) in COUNTED.items():
        (here / f"{name}.toml").write_text(counted(name, sites, hosts))


if __name__ == "__main__":
    main()
