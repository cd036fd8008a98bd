"""The guides say what the code does: each table of examples a guide gives is checked against the code
that reads it (a guide that describes a syntax it does not have misleads more than no guide)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from geosim.studies.sweep.grid import parse_values

GUIDES = Path(__file__).resolve().parent.parent / "docs" / "guide"


def _grid_spec_rows() -> list[tuple[str, str]]:
    """(spec, what the guide says it gives) of the sweeps guide's 'Grid specs' table."""
    text = (GUIDES / "sweeps.md").read_text()
    table = text.split("## Grid specs", 1)[1].split("\n\n")[2]
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^\| `([^`]+)` \| (.+) \|$", table, re.M)]


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", text)]


@pytest.mark.parametrize("spec,says", [r for r in _grid_spec_rows() if re.fullmatch(r"[\d.]+:[\d.]+:[\d.]+", r[0])])
def test_a_numeric_range_in_the_sweeps_guide_gives_the_values_it_lists(spec, says):
    listed = _numbers(says.split(":", 1)[1])
    assert parse_values(spec, "float", "--rtt-ms") == listed


def test_the_sweeps_guide_grid_table_is_found():
    specs = [spec for spec, _ in _grid_spec_rows()]
    assert "0:100:25" in specs and "0.1:150:x2" in specs
    start, factor = 0.1, 2.0
    values = parse_values("0.1:150:x2", "float", "--rtt-ms")
    assert values[:3] == [start, start * factor, start * factor ** 2] and values[-1] <= 150


def test_the_scenarios_guide_names_no_gpu_list_of_its_own():
    """The catalog's cards are listed where the list is generated (docs/reference/gpus.md), so a guide cannot
    name fewer than there are (it once listed 9 of 17)."""
    text = (GUIDES / "scenarios-params.md").read_text()
    catalog = text.split("### Catalogs", 1)[1].split("Models", 1)[0]
    assert "../reference/gpus.md" in catalog and "generated" in catalog
