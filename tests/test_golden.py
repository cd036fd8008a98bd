"""The default `geosim predict` prints the same figures as the shipped golden output.

A refactor must not move a single figure; a change that means to (new physics, refitted
defaults) regenerates the file with `python tests/test_golden.py --update` and says why
in its commit. The techniques compared are the registry's that the golden file holds: a
technique added since (a new file in geosim/techniques/) adds rows of its own, which are
left out of the comparison, and must move no other figure.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

from geosim.cli import main
from geosim.techniques import technique_names

GOLDEN = Path(__file__).parent / "golden" / "predict-default.txt"


def default_predict_output() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["predict"]) == 0
    return out.getvalue()


def technique_of(line: str) -> str | None:
    """The technique a row of predict's tables names (its first word, indented), else None."""
    words = line.split()
    return words[0] if line.startswith("  ") and words and words[0] in technique_names() else None


def without_techniques(text: str, names: set[str]) -> str:
    """The output less the rows of these techniques, and the indented notes under them."""
    kept, skipping = [], False
    for line in text.splitlines(keepends=True):
        if technique_of(line) in names:
            skipping = True
            continue
        if skipping and line.startswith(" " * 10) and technique_of(line) is None:  # a note under the row
            continue
        skipping = False
        kept.append(line)
    return "".join(kept)


def compared(output: str, golden: str) -> str:
    held = {technique_of(line) for line in golden.splitlines()} - {None}
    return without_techniques(output, set(technique_names()) - held)


def test_default_predict_matches_golden_output():
    golden = GOLDEN.read_text()
    assert compared(default_predict_output(), golden) == golden


def test_a_new_technique_moves_no_golden_figure(toy_technique):
    """A toy technique file, nothing else touched: predict lists it, and every other figure is the golden one."""
    golden, output = GOLDEN.read_text(), default_predict_output()
    assert any(technique_of(line) == toy_technique for line in output.splitlines())
    assert compared(output, golden) == golden


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
    GOLDEN.write_text(default_predict_output())
    print(f"wrote {GOLDEN}")
