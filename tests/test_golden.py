"""The default `geosim predict` prints the same figures as the shipped golden output.

A refactor must not move a single figure; a change that means to (new physics, refitted
defaults) regenerates the file with `python tests/test_golden.py --update` and says why
in its commit.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

from geosim.cli import main

GOLDEN = Path(__file__).parent / "golden" / "predict-default.txt"


def default_predict_output() -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["predict"]) == 0
    return out.getvalue()


def test_default_predict_matches_golden_output():
    assert default_predict_output() == GOLDEN.read_text()


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
    GOLDEN.write_text(default_predict_output())
    print(f"wrote {GOLDEN}")
