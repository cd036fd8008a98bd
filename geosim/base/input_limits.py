"""Bounded work on any input: a size and a nesting limit checked before any TOML or JSON is parsed.

Python's parsers take whatever they are given: tomllib spends seconds and gigabytes on one long
dotted key (60 KB: 10 s and 3.5 GB), both end in a RecursionError traceback on an array nested
1e5 deep, and a 200 MB scenario is parsed whole before its host count is checked. Every file
geosim reads passes these checks first, each failure one line naming the file. The limits are far
above any file geosim or a study writes (docs/reference/bounds.md, "Input files"):

- size: TOML_MAX_BYTES for a scenario, parameters or runtimes file, JSON_MAX_BYTES for one JSON
  document (a state file, a slice file), RECORDS_MAX_BYTES for a JSON Lines file (run records,
  sweep rows), and LINE_MAX_BYTES for one of its lines;
- nesting: MAX_DEPTH arrays and tables inside each other; MAX_KEY_PARTS parts in a dotted key.

The scans are linear and run at C speed (str.replace and re without backtracking), so checking
costs far less than the parse it guards.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path

from geosim.base.errors import GeosimError

MiB = 1 << 20
TOML_MAX_BYTES = 16 * MiB  # a 4,096-host scenario with every link written out is ~2 MB
JSON_MAX_BYTES = 16 * MiB  # a WAN or slice state file is a few KB
RECORDS_MAX_BYTES = 64 * MiB  # ~150,000 run records, read in under 1 GB (a study has a few hundred)
LINE_MAX_BYTES = 4 * MiB  # one run record is 1-3 KB
MAX_DEPTH = 64  # geosim's own files nest 4 deep
MAX_KEY_PARTS = 32  # geosim's keys have at most 4 parts (gpus.A40.memory_gib)

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_TOML_STRING_OR_COMMENT = re.compile(
    r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\n]*\'|#[^\n]*')
# MAX_KEY_PARTS parts joined by dots, starting where a key starts (so no start inside a long word
# is tried again: linear); possessive quantifiers, so a long word is scanned once
_LONG_DOTTED_KEY = re.compile(r'(?<![\w"\-])(?:[\w"\-]++[ \t]*+\.[ \t]*+){%d}' % MAX_KEY_PARTS)
_OPEN_CLOSE = str.maketrans({"[": "(", "{": "(", "]": ")", "}": ")"})


def human_bytes(n: int) -> str:
    return f"{n / MiB:,.0f} MiB" if n >= MiB else f"{n:,} bytes"


def check_file_size(path: str | Path, limit: int, what: str, source: str | None = None) -> int:
    """Refuse a file larger than `limit` before reading it; returns its size."""
    try:
        size = os.stat(path).st_size
    except OSError:
        return 0  # missing or unreadable: the reader's own one line says which
    if size > limit:
        raise GeosimError(f"{human_bytes(size)} is larger than any {what} (at most {human_bytes(limit)}); "
                          f"not read", source=source or str(path))
    return size


def nesting_depth(brackets: str, limit: int = MAX_DEPTH) -> int:
    """How deep '(' and ')' nest, counted up to limit + 1 (each pass removes the innermost pairs)."""
    depth = 0
    while "()" in brackets and depth <= limit:
        brackets = brackets.replace("()", "")
        depth += 1
    return depth


def _only_brackets(text: str) -> str:
    return "".join(re.findall(r"[\[\]{}]+", text)).translate(_OPEN_CLOSE)


def check_json_text(text: str, source: str) -> None:
    """Refuse JSON nested deeper than MAX_DEPTH (Python's parser would raise RecursionError)."""
    if "[" not in text and "{" not in text:
        return
    depth = nesting_depth(_only_brackets(_JSON_STRING.sub('""', text)))
    if depth > MAX_DEPTH:
        raise GeosimError(f"nested more than {MAX_DEPTH} deep (arrays or objects inside each other); not parsed",
                          source=source)


def check_toml_text(text: str, source: str) -> None:
    """Refuse TOML nested deeper than MAX_DEPTH or with a key of more than MAX_KEY_PARTS dotted parts."""
    bare = _TOML_STRING_OR_COMMENT.sub('""', text)
    if nesting_depth(_only_brackets(bare)) > MAX_DEPTH:
        raise GeosimError(f"nested more than {MAX_DEPTH} deep (arrays or tables inside each other); not parsed",
                          source=source)
    long_key = _LONG_DOTTED_KEY.search(bare)
    if long_key:
        line = text.count("\n", 0, long_key.start()) + 1 if len(bare) == len(text) else None
        raise GeosimError(f"a dotted key of more than {MAX_KEY_PARTS} parts; not parsed", source=source, line=line)


def loads_toml(text: str, source: str) -> dict:
    """tomllib.loads after the size and nesting checks (TOMLDecodeError is the caller's to word)."""
    if len(text) > TOML_MAX_BYTES:
        raise GeosimError(f"{human_bytes(len(text))} is larger than any TOML file geosim reads (at most "
                          f"{human_bytes(TOML_MAX_BYTES)}); not parsed", source=source)
    check_toml_text(text, source)
    return tomllib.loads(text)


def loads_json(text: str, source: str, limit: int = JSON_MAX_BYTES, **kwargs):
    """json.loads after the size and nesting checks (JSONDecodeError is the caller's to word)."""
    if len(text) > limit:
        raise GeosimError(f"{human_bytes(len(text))} is larger than any JSON geosim reads here (at most "
                          f"{human_bytes(limit)}); not parsed", source=source)
    check_json_text(text, source)
    return json.loads(text, **kwargs)


def read_json_file(path: str | Path, source: str | None = None, limit: int = JSON_MAX_BYTES):
    """A JSON file's document: read by read_input (a regular file, its size checked before reading),
    its nesting checked before parsing."""
    text = read_input(path, limit, "JSON file geosim reads", source)
    return loads_json(text, source or str(path), limit)


SMALL_TEXT_MAX_BYTES = 4 * MiB  # a side file of a scenario (bandwidth samples: 100,000 values) or a CSV


def read_input(path: str | Path, limit: int, what: str, source: str | None = None, key: str | None = None) -> str:
    """The one reader of a file the user names (a scenario, its side files, a CSV, a log, records):
    opened without blocking (a FIFO has no writer to wait for), then refused unless it is a regular
    file (a device such as /dev/zero never ends), larger than `limit` refused before reading, read
    at most `limit` bytes (a file that grows, or a /proc file that says size 0), and decoded as
    strict UTF-8. Every refusal is one line naming the file and never quotes its content (a file
    named by mistake, or on purpose, may be a secret: /etc/shadow, /proc/self/environ)."""
    import stat

    where = source or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise GeosimError("no such file", source=where, key=key) from None
    except OSError as exc:
        raise GeosimError(f"cannot read ({exc.strerror})", source=where, key=key) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise GeosimError("is a directory, not a file", source=where, key=key)
        kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device"
        raise GeosimError(f"is {kind}, not a regular file; not read", source=where, key=key)
    with os.fdopen(fd, "rb") as f:
        size = st.st_size
        if size > limit:
            raise GeosimError(f"{human_bytes(size)} is larger than any {what} (at most {human_bytes(limit)}); "
                              f"not read", source=where, key=key)
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise GeosimError(f"cannot read ({exc.strerror})", source=where, key=key) from None
    if len(data) > limit:
        raise GeosimError(f"larger than any {what} (at most {human_bytes(limit)}); not read", source=where, key=key)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GeosimError(f"not UTF-8 text (byte {exc.start:,}); not read", source=where, key=key) from None


MAX_NAME_CHARS = 100  # a slice or scenario name; FABRIC's own names are far shorter


def check_name(text: str, source: str, what: str = "name") -> str:
    """A name that goes into files, commands and remote requests: not empty, at most MAX_NAME_CHARS,
    and no control or invisible formatting characters (bidirectional overrides, zero-width spaces:
    a name that reads differently from what it is)."""
    import unicodedata

    if not text or not text.strip():
        raise GeosimError(f"an empty {what}", source=source)
    if len(text) > MAX_NAME_CHARS:
        raise GeosimError(f"a {what} of {len(text):,} characters (at most {MAX_NAME_CHARS})", source=source)
    bad = next((c for c in text if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")), None)
    if bad is not None:
        raise GeosimError(f"the {what} holds an invisible or control character (U+{ord(bad):04X}, "
                          f"{unicodedata.name(bad, 'unnamed')})", source=source)
    return text
