"""Rewrite the shown output of the docs' console blocks with what the commands print today.

    python tools/refresh_docs_outputs.py docs/guide/select-plan.md   # one page
    python tools/refresh_docs_outputs.py --all                        # README.md and every guide
    python tools/refresh_docs_outputs.py --all --check                # exit 1 if any shown output moved

After a refit of the shipped parameters the figures in the pages go stale: tests/test_docs.py
only checks each command's first shown line, numbers matching anything. This runs every block
as that test does (a fresh directory with the page's files, this checkout's geosim) and puts
today's lines in place of the shown ones, keeping the page's shape: a shown stretch between
`...` lines is aligned on its first line and keeps its length, a line cut short with `...` is
kept as it is, and a stretch whose first line no longer appears is left alone and reported.
Blocks marked `skip` or needing root are not run.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import test_docs as docs  # noqa: E402  (the docs test's own parser and environment)


def shown_stretches(command: docs.Command) -> list[list[int]]:
    """A command's shown lines as body indices, split into stretches at `...` lines."""
    stretches: list[list[int]] = [[]]
    for line, i in zip(command.shown_output, command.shown_at):
        if line.strip() == "...":
            stretches.append([])
        else:
            stretches[-1].append(i)
    return [s for s in stretches if s]


def run_block(block: docs.Block) -> list[list[str]]:
    """What each command of the block prints (stdout, then stderr), as lines."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in docs.page_files(block.page).items():
            (Path(tmp) / name).write_text(text)
        return [(r.stdout + r.stderr).splitlines() for r in (docs.run_command(block, c, Path(tmp)) for c in block.commands)]


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def refresh_page(page: Path, say) -> tuple[str, int]:
    """The page's text with today's shown outputs, and the number of shown lines that changed."""
    lines = page.read_text().splitlines()
    changed = 0
    for start, language, body, options in docs.fences(page):
        if language not in docs.COMMAND_FENCES or "file" in options or "skip" in options or options.get("root"):
            continue
        commands = docs.split_commands(body)
        if not commands or any(c.text.startswith("sudo ") for c in commands) or not any(c.shown_output for c in commands):
            continue
        indent = lines[start - 1][:len(lines[start - 1]) - len(lines[start - 1].lstrip())]
        printed = run_block(docs.Block(page, start, commands, options))
        for command, new in zip(commands, printed):
            cursor = 0
            for stretch in shown_stretches(command):
                first = next((i for i in stretch if body[i].strip()), None)
                if first is None:
                    continue
                pattern = docs.shown_line_pattern(body[first])
                at = next((k for k in range(cursor, len(new)) if pattern.search(" ".join(new[k].split()))), None)
                if at is None:
                    say(f"{_name(page)}:{start + first + 1}: not printed any more, left alone: "
                        f"{body[first].strip()[:80]}")
                    continue
                for offset, i in enumerate(i for i in stretch if i >= first):
                    if at + offset >= len(new):
                        break
                    line_no = start + i  # the body's line i is the page's line start + 1 + i (1-based)
                    if "..." in body[i]:  # the author cut this line short: keep the cut
                        continue
                    fresh = (indent + new[at + offset]).rstrip() if new[at + offset].strip() else ""
                    if lines[line_no].rstrip() != fresh:
                        lines[line_no] = fresh
                        changed += 1
                cursor = at + len(stretch)
    return "\n".join(lines) + "\n", changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", type=Path, help="pages to refresh (default with --all: every docs-tested page)")
    parser.add_argument("--all", action="store_true", help="README.md and every page in docs/guide/")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a shown output moved")
    args = parser.parse_args(argv)
    pages = docs.PAGES if args.all else [p.resolve() for p in args.pages]
    if not pages:
        parser.error("name pages, or --all")
    unknown = [p for p in pages if p not in docs.PAGES]
    if unknown:
        parser.error(f"not a docs-tested page: {', '.join(map(str, unknown))}")
    total = 0
    for page in pages:
        text, n = refresh_page(page, lambda line: print(line, file=sys.stderr))
        if n and not args.check:
            page.write_text(text)
        print(f"{_name(page)}: {n} shown line(s) {'would change' if args.check else 'changed'}")
        total += n
    return 1 if args.check and total else 0


if __name__ == "__main__":
    sys.exit(main())
