"""Every command shown in README.md and docs/guide/*.md runs, and prints what the page shows.

The convention (README.md, "Documentation map"):

- A command is a line starting with `$ ` inside a ```console or ```sh fence; a line ending
  in `\\` continues on the next. The lines after a command, up to the next `$ ` line, are
  its shown output (`...` stands for lines left out).
- An HTML comment right above the fence tunes the test, items separated by `;`:
  `<!-- docs-test: slow; timeout 900; exit 2; expect "text"; root; skip: why -->` (`skip:`
  comes last: the rest of the comment is the reason).
  `slow`: the block takes more than a few seconds (marked `slow`); `exit N`: every command
  of the block exits N (default 0); `expect "text"`: the text appears in the block's output
  (stdout and stderr); `root`: needs root and network namespaces (marked `root`, skipped
  without); `skip: why`: shown but not run here (say why: a GPU cluster, the set-up
  commands that .ci/run runs).
- A command with shown output must print the first line shown (spaces collapsed; numbers
  and `...` match anything): enough to catch a renamed command or a changed table, not so
  much that every refit of the parameters breaks the docs. Show a stable line first.
- `<!-- docs-test: file NAME -->` above any fence writes the fence's text to NAME in the
  directory the page's blocks run in (a scenario file the page then predicts on).
- Each block runs in a fresh temporary directory holding the page's files, with this
  environment's bin directory first on PATH (its `geosim`, its `python`) and this checkout's
  `geosim` package first on PYTHONPATH; a leading `sudo ` is dropped (the block is `root`).
  A plain `geosim` command of a subcommand that only reads and prints (IN_PROCESS: no shell
  syntax, no pipes, no workers it forks) runs in this process instead, in that directory and
  with the same environment: the same exit code, stdout and stderr, without a Python start and
  geosim's imports each (most of such a command's time). Every other command runs in bash.

Commands in fences without `$ ` are not allowed in these pages (test_no_command_hides_from_the_test):
every command a reader may copy is run here.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
COMMAND_FENCES = {"console", "sh", "shell", "bash"}
DIRECTIVE = re.compile(r"^<!--\s*docs-test:(.*?)-->\s*$")
NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?"
DEFAULT_TIMEOUT_S = 300


@dataclass
class Command:
    text: str
    shown_output: list[str] = field(default_factory=list)
    shown_at: list[int] = field(default_factory=list)  # where each shown line stands in the fence's body


@dataclass
class Block:
    page: Path
    line: int
    commands: list[Command]
    options: dict

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def parse_directive(text: str) -> dict:
    options: dict = {"expect": []}
    if "skip:" in text:  # the reason is the rest of the comment, semicolons and all
        text, reason = text.split("skip:", 1)
        options["skip"] = reason.strip()
    for item in (part.strip() for part in text.split(";")):
        if not item:
            continue
        if item.startswith("expect "):
            options["expect"].append(shlex.split(item[len("expect "):])[0])
        elif item.startswith("exit "):
            options["exit"] = int(item.split()[1])
        elif item.startswith("timeout "):
            options["timeout"] = float(item.split()[1])
        elif item.startswith("file "):
            options["file"] = item.split(None, 1)[1].strip()
        elif item in ("slow", "root"):
            options[item] = True
        else:
            raise ValueError(f"unknown docs-test item {item!r}")
    return options


def fences(page: Path):
    """(line number, language, lines, options from the directive above) for every fence."""
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, language, start = m.group(1), m.group(2), i
        body = []
        i += 1
        while i < len(lines) and not re.match(rf"^{indent}```\s*$", lines[i]):
            body.append(lines[i][len(indent):])
            i += 1
        options: dict = {"expect": []}
        j = start - 1
        while j >= 0 and (d := DIRECTIVE.match(lines[j].strip())):  # directives may stack
            parsed = parse_directive(d.group(1))
            options["expect"] = parsed.pop("expect") + options["expect"]
            options.update(parsed)
            j -= 1
        yield start + 1, language, body, options
        i += 1


def split_commands(body: list[str]) -> list[Command]:
    commands: list[Command] = []
    continuing = False
    for i, line in enumerate(body):
        if continuing:
            commands[-1].text += "\n" + line
            continuing = line.rstrip().endswith("\\")
        elif line.startswith("$ "):
            commands.append(Command(line[2:]))
            continuing = line.rstrip().endswith("\\")
        elif commands:
            commands[-1].shown_output.append(line)
            commands[-1].shown_at.append(i)
    return commands


# subcommands that read their inputs and print an answer (or write the file they are asked for):
# nothing forked, no state left in the process; their plain commands run in this process
IN_PROCESS = {"predict", "plan", "select", "trace", "models", "sites"}
SHELL_SYNTAX = re.compile(r"[|&;<>()$`\\*?~{}\[\]#\n]")


def in_process_argv(text: str) -> list[str] | None:
    """The arguments of a plain `geosim SUBCOMMAND ...` command of IN_PROCESS; None for anything a
    shell must run (pipes, redirections, globs, variables, `;`, another program)."""
    text = text.replace("\\\n", " ")  # a continued line is one command
    if SHELL_SYNTAX.search(text):
        return None
    argv = shlex.split(text)
    return argv[1:] if len(argv) > 1 and argv[0] == "geosim" and argv[1] in IN_PROCESS else None


def run_command(block: Block, command: Command, cwd: Path) -> subprocess.CompletedProcess:
    """One command of a block as a reader would run it (a leading `sudo ` dropped: the block is `root`)."""
    argv = in_process_argv(command.text)
    if argv is not None:
        with pytest.MonkeyPatch.context() as patch:  # (tools/refresh_docs_outputs.py calls this too)
            for name, value in environment().items():
                if os.environ.get(name) != value and name not in ("PATH", "PYTHONPATH"):
                    patch.setenv(name, value)
            patch.delenv("GEOSIM_WAN_STATE", raising=False)
            patch.chdir(cwd)
            code, out, err = run_cli(argv)
        return subprocess.CompletedProcess(argv, code, out, err)
    return subprocess.run(["bash", "-o", "pipefail", "-c", command.text.removeprefix("sudo ")], cwd=cwd,
                          env=environment(), capture_output=True, text=True,
                          timeout=block.options.get("timeout", DEFAULT_TIMEOUT_S))


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        for line, language, body, options in fences(page):
            if language in COMMAND_FENCES and "file" not in options:
                commands = split_commands(body)
                if commands:
                    found.append(Block(page, line, commands, options))
    return found


def page_files(page: Path) -> dict[str, str]:
    return {opts["file"]: "\n".join(body) + "\n" for _, _, body, opts in fences(page) if "file" in opts}


def shown_line_pattern(line: str) -> re.Pattern:
    """The shown line as a regex: spaces collapsed, numbers and `...` match anything."""
    parts = []
    for piece in re.split(rf"(\.\.\.|{NUMBER})", " ".join(line.split())):
        if piece == "...":
            parts.append(".*?")
        elif re.fullmatch(NUMBER, piece):
            parts.append(NUMBER)
        else:
            parts.append(re.escape(piece).replace(r"\ ", r"\s+"))
    return re.compile("".join(parts))


def first_shown_line(command: Command) -> str | None:
    for line in command.shown_output:
        if line.strip() and line.strip() != "...":
            return line
    return None


def needs_root(block: Block) -> bool:
    return block.options.get("root", False) or any(c.text.startswith("sudo ") for c in block.commands)


def block_params():
    params = []
    for block in blocks():
        marks = []
        if block.options.get("slow"):
            marks.append(pytest.mark.slow)
        if needs_root(block):
            marks.append(pytest.mark.root)
        params.append(pytest.param(block, id=block.name, marks=marks))
    return params


@functools.cache
def package_shim() -> Path:
    """A directory holding only `geosim` (a link to this checkout's): on PYTHONPATH it makes the
    commands run this checkout's code even from an environment installed from another one, as
    the tests do, without making the checkout's other top-level directories importable (a user's
    `geosim` cannot import `live` or `calibrate` by those names either)."""
    shim = Path(tempfile.mkdtemp(prefix="geosim-docs-shim-"))
    atexit.register(shutil.rmtree, shim, ignore_errors=True)  # (each run left one in /tmp)
    (shim / "geosim").symlink_to(ROOT / "geosim", target_is_directory=True)
    return shim


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = str(package_shim())
    env["COLUMNS"] = "100"
    env.pop("GEOSIM_WAN_STATE", None)
    return env


@pytest.mark.parametrize("block", block_params())
def test_command_block(block: Block, tmp_path: Path):
    if "skip" in block.options:
        pytest.skip(f"{block.name}: {block.options['skip']}")
    if needs_root(block) and (os.geteuid() != 0 or not Path("/dev/net/tun").exists()):
        pytest.skip("needs root and /dev/net/tun")
    for name, text in page_files(block.page).items():
        (tmp_path / name).write_text(text)
    expected_exit = block.options.get("exit", 0)
    output = ""
    for command in block.commands:
        result = run_command(block, command, tmp_path)
        printed = result.stdout + result.stderr
        assert result.returncode == expected_exit, (
            f"{block.name}: `{command.text}` exited {result.returncode}, not {expected_exit}:\n{printed[-3000:]}")
        shown = first_shown_line(command)
        if shown is not None:
            pattern = shown_line_pattern(shown)
            assert any(pattern.search(" ".join(line.split())) for line in printed.splitlines()), (
                f"{block.name}: `{command.text}` did not print the shown line\n  {shown.strip()}\n"
                f"it printed:\n{printed[-3000:]}")
        output += printed
    for text in block.options["expect"]:
        assert text in output, f"{block.name}: expected {text!r} in the output:\n{output[-3000:]}"


def test_every_page_has_commands_and_the_convention_parses():
    names = {b.page.name for b in blocks()}
    assert "README.md" in names
    for page in PAGES:  # an unknown directive item raises here, naming it
        list(fences(page))


COMMAND_WORDS = re.compile(r"^\s*(sudo\s+)?(geosim|python3?|pip|\.venv/bin/\S+|\.\s+\.venv/bin/activate)\b")


def test_no_command_hides_from_the_test():
    """A command line outside the `$ ` convention would be shown to readers but never run."""
    hidden = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        for line_no, language, body, options in fences(page):
            if language not in COMMAND_FENCES | {""} or "file" in options:
                continue
            if any(line.startswith("$ ") for line in body):
                continue  # its other lines are shown output
            hidden += [f"{page.relative_to(ROOT)}:{line_no + offset + 1}: {line.strip()}"
                       for offset, line in enumerate(body) if COMMAND_WORDS.match(line)]
        in_fence = False
        for n, line in enumerate(lines, 1):  # indented code blocks are never run: no commands in them
            if line.lstrip().startswith("```"):
                in_fence = not in_fence
            elif not in_fence and line.startswith("    ") and COMMAND_WORDS.match(line):
                hidden.append(f"{page.relative_to(ROOT)}:{n}: {line.strip()} (indented code block)")
    assert not hidden, "commands the docs test cannot see (write them as `$ ` lines in a ```console fence):\n" + \
        "\n".join(hidden)


def markdown_links(page: Path):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"^[a-z]+:", target) and not target.startswith("#"):
            yield target.split("#")[0]


def test_links_between_pages_resolve():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = []
    for page in docs:
        for target in markdown_links(page):
            path = (page.parent / target).resolve()
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, "links to nothing:\n" + "\n".join(broken)


def test_no_paths_of_one_machine_in_the_docs():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    offenders = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
                 for p in docs for n, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(r"(/work/|/home/|/root/|/tmp/\w)", line)]
    assert not offenders, "\n".join(offenders)


def readme_setup_commands() -> list[str]:
    for block in blocks():
        if block.page.name == "README.md":
            return [c.text for c in block.commands]  # the first command block is the set-up
    raise AssertionError("README.md has no command block")


def test_ci_runs_the_readme_setup_commands_exactly():
    """The set-up block is skipped above because .ci/run runs it, in a new virtual environment."""
    ci = (ROOT / ".ci" / "run").read_text()
    setup = readme_setup_commands()
    assert len(setup) == 2
    for command in setup:
        assert command in ci, f".ci/run does not run the README's set-up command `{command}`"


def test_readme_stays_a_short_manual():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


# The parameters reference is generated from the parameters' declaration: tests/test_params_declared.py.
