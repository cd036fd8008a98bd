"""What the reference generators share: `--check` compares a page with what the code writes,
otherwise the page is written (through geosim's one atomic writer) where it changed."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's geosim, not an installed one


def write_or_check(page: Path, text: str, argv: list[str], tool: str) -> tuple[int, bool]:
    """(exit code, whether the page was written). With --check: 1 and a line on stderr where the
    page is stale, written nothing."""
    current = page.read_text() if page.exists() else None
    if "--check" in argv:
        if current != text:
            print(f"{page.relative_to(ROOT)} is out of date: run python tools/{tool}", file=sys.stderr)
            return 1, False
        return 0, False
    if current == text:
        return 0, False
    from geosim.base.fileio import write_atomic

    write_atomic(page, text)
    return 0, True
