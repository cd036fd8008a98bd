"""User-facing errors: one line naming the file, the line, the key and what is wrong."""

from __future__ import annotations

import re


class GeosimError(Exception):
    """A mistake in the user's input. The CLI prints it as one line and exits 2.

    Printed as `file:line: key: problem`; each part is left out when unknown."""

    def __init__(self, problem: str, *, source: str | None = None, key: str | None = None, line: int | None = None):
        self.problem = problem
        self.source = source
        self.key = key
        self.lineno = line
        super().__init__(self.line())

    def line(self) -> str:
        source = self.source
        if source is not None and self.lineno is not None:
            source = f"{source}:{self.lineno}"
        where = ": ".join(str(part) for part in (source, self.key) if part)
        problem = elide_long_words(self.problem)
        return f"{where}: {problem}" if where else problem


_LONG_WORD = re.compile(r"\S{201,}")  # an echoed value of thousands of characters: its ends say which


def _elide(match: re.Match) -> str:
    word = match.group(0)
    return f"{word[:80]}...{word[-40:]} ({len(word):,} characters)"


def elide_long_words(text: str) -> str:
    """`text` with each run of more than 200 non-blank characters cut to its ends and its length."""
    return _LONG_WORD.sub(_elide, text)


class MissingExtraError(GeosimError):
    """A subcommand needs an optional dependency that is not installed."""

    def __init__(self, extra: str, module: str, command: str):
        super().__init__(
            f"'{command}' needs the '{extra}' extra ({module} is not installed): "
            f"pip install 'geosim[{extra}]'"
        )


def require(module: str, extra: str, command: str):
    """Import an optional heavy module, or explain which extra installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(extra, module, command) from exc


_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_ASSIGN = re.compile(r"^\s*([A-Za-z0-9_\-.\"' ]+?)\s*=")


def _bare(part: str) -> str:
    return part.strip().strip("\"'")


def toml_key_line(text: str, key: str | None) -> int | None:
    """The line of a TOML document where a dotted key ('links[1].rtt_ms', 'gpus.X.memory_gib') is set.

    tomllib gives values, not positions; this follows table headers ([a.b], [[a]] with their
    index) and key = value lines, enough to point an error at a line. None if not found."""
    if not key:
        return None
    wanted = [p for p in re.split(r"\.(?![^\[]*\])", key) if p]
    want = []
    for part in wanted:  # 'links[1]' -> ('links', 1)
        m = re.fullmatch(r"(.+?)\[(\d{1,9})\]", part)
        want.extend([m.group(1), int(m.group(2))] if m else [part])
    counts: dict[tuple, int] = {}
    table: list = []
    best: tuple[int, int] | None = None  # (matched parts, line)
    for number, raw in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(raw)
        if header and not raw.lstrip().startswith("#"):
            names = [_bare(p) for p in header.group(2).split(".")]
            if header.group(1) == "[[":
                counts[tuple(names)] = counts.get(tuple(names), -1) + 1
                table = names[:-1] + [names[-1], counts[tuple(names)]]
            else:
                table = names
            path = table
        else:
            assign = _ASSIGN.match(raw)
            if not assign or raw.lstrip().startswith("#"):
                continue
            path = table + [_bare(p) for p in assign.group(1).split(".")]
        matched = 0
        for a, b in zip(path, want):
            if a != b:
                break
            matched += 1
        if matched == len(want) and len(path) >= len(want):
            return number
        if matched == len(path) and matched and (best is None or matched > best[0]):
            best = (matched, number)
    return best[1] if best else None
