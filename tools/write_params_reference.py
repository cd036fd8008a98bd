"""Write the generated tables of docs/reference/params.md from the parameters' one declaration.

    python tools/write_params_reference.py            # rewrite the tables in docs/reference/params.md and runtimes.md
    python tools/write_params_reference.py --check    # exit 1 if they are out of date (tests/test_params_declared.py)

The simulator-wide parameters come from geosim/base/parameters.py (with the shipped values of
geosim/data/params-default.toml), each network backend's own from its module (PARAMETERS,
geosim.sim.network.network_parameters), each technique's tunables from its Settings (the registry,
geosim.techniques.reference_table). Everything between a `<!-- generated: NAME -->` line and the
next `<!-- end generated -->` line is replaced; the prose around them is the page's own.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's geosim, not an installed one

from _generated import write_or_check  # noqa: E402 (tools/_generated.py)

PAGE = ROOT / "docs" / "reference" / "params.md"
RUNTIMES_PAGE = ROOT / "docs" / "reference" / "runtimes.md"  # its table of a runtime's keys (geosim.base.parameters)
PAGES = (PAGE, RUNTIMES_PAGE)
BLOCK = re.compile(r"(<!-- generated: (\w+) -->\n)(.*?)(<!-- end generated -->)", re.S)


def tables() -> dict[str, str]:
    from geosim import techniques
    from geosim.base import parameters
    from geosim.inputs.params import _flatten
    from geosim.sim.network import network_parameters

    shipped = _flatten(tomllib.loads((ROOT / "geosim" / "data" / "params-default.toml").read_text()))
    network = tuple(p for _, declared, _ in network_parameters().values() for p in declared)
    return {"parameters": parameters.reference_table(shipped), "techniques": techniques.reference_table(),
            "network": parameters.reference_table(shipped, network, ()), "runtime": parameters.runtime_reference_table()}


def render(text: str) -> str:
    generated = tables()
    return BLOCK.sub(lambda m: m.group(1) + generated[m.group(2)] + m.group(4), text)


def main(argv: list[str]) -> int:
    return max(write_or_check(page, render(page.read_text()), argv, "write_params_reference.py")[0] for page in PAGES)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
