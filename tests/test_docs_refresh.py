"""tools/refresh_docs_outputs.py: a page's shown output replaced by what its commands print today,
keeping the page's shape (`...` stretches, lines cut short, lines no longer printed)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import refresh_docs_outputs as refresh  # noqa: E402

PAGE = """# a page

```console
$ printf 'head\\nvalue 1\\nmiddle\\nvalue 2 is long\\ntail 3\\n'
head
value 9
...
value 8 is ...
tail 7
$ echo gone
this line is not printed any more
```
"""


def test_shown_output_is_refreshed_in_the_pages_shape(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    told = []
    text, changed = refresh.refresh_page(page, told.append)
    assert changed == 2 and page.read_text() == PAGE  # the caller writes it
    lines = text.splitlines()
    body = lines[lines.index("```console") + 1:]
    assert body[:6] == ["$ printf 'head\\nvalue 1\\nmiddle\\nvalue 2 is long\\ntail 3\\n'", "head", "value 1", "...",
                        "value 8 is ...", "tail 3"]  # the cut line stays cut; the stretch after '...' is aligned
    assert "this line is not printed any more" in body  # left alone, and said so
    assert len(told) == 1 and "not printed any more" in told[0]


def test_stretches_split_at_ellipsis_lines_per_command():
    body = ["$ a", "x", "...", "y", "z", "$ b \\", "  --flag", "w"]
    first, second = refresh.docs.split_commands(body)
    assert second.text == "b \\\n  --flag"
    assert refresh.shown_stretches(first) == [[1], [3, 4]] and refresh.shown_stretches(second) == [[7]]
