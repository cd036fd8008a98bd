"""One vocabulary: a flag name means the same thing in every subcommand, every option says what it
does, and a default a help text quotes is the code's (geosim/cli/vocabulary.py keeps the table)."""

from __future__ import annotations

import argparse
import dataclasses
import re

import pytest

from geosim.cli import build_parser
from geosim.cli.vocabulary import DEFAULTS_DIFFER, FLAGS, RENAMED, CommaList, RenamedFlag
from geosim.inputs.specs import Workload
from geosim.base.validate import INTEGER_TYPES

WORKLOAD_DEFAULTS = {f"--{f.name.replace('_', '-')}": f.default for f in dataclasses.fields(Workload)}


def subcommands(parser: argparse.ArgumentParser, path: str = "geosim"):
    """(path, parser) for every parser under `parser`: predict, calibrate fit, live wan up, ..."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{path} {name}", sub
                yield from subcommands(sub, f"{path} {name}")


def options(parser: argparse.ArgumentParser):
    """The options a subcommand documents (not --help, not the old names kept for now)."""
    for action in parser._actions:
        if action.option_strings and not isinstance(action, (argparse._HelpAction, argparse._VersionAction,
                                                             RenamedFlag)):
            yield action


def signature(action: argparse.Action) -> str:
    """What kind of value an option takes, as FLAGS's kinds name it."""
    if isinstance(action, CommaList):
        return "list"
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return "flag"
    if action.type in INTEGER_TYPES:
        return "int"
    if action.type is float:
        return "float"
    if isinstance(action, argparse._AppendAction):
        return "append"
    return "one" if action.type in (None, str, str.lower) else getattr(action.type, "__name__", "custom")


def kinds(flag: str) -> set[str]:
    return {"one" if k == "spec" else k for k in FLAGS[flag][0].split("|")}


ALL = [(path, p) for path, p in subcommands(build_parser())]


def test_the_walk_reaches_every_registered_subcommand():
    paths = {path for path, _ in ALL}
    for expected in ("geosim predict", "geosim select", "geosim plan", "geosim sweep", "geosim report",
                     "geosim trace", "geosim models", "geosim calibrate import", "geosim calibrate fit",
                     "geosim live run", "geosim live wan up"):
        assert expected in paths


def test_a_flag_means_one_thing_everywhere():
    uses: dict[str, list[tuple[str, str]]] = {}
    for path, parser in ALL:
        for action in options(parser):
            for flag in action.option_strings:
                if flag.startswith("--"):
                    uses.setdefault(flag, []).append((path, signature(action)))
    problems = []
    for flag, where in uses.items():
        commands = {path for path, _ in where}
        if flag not in FLAGS:
            if len(commands) > 1:
                problems.append(f"{flag} is used by {sorted(commands)} but has no entry in vocabulary.FLAGS")
            continue
        for path, sig in where:
            if sig not in kinds(flag):
                problems.append(f"{path} {flag} takes {sig}; vocabulary.FLAGS says {FLAGS[flag][0]} "
                                f"({FLAGS[flag][1]})")
    assert problems == []


def test_a_flag_has_one_default_everywhere_or_the_vocabulary_says_why():
    defaults: dict[str, dict[str, object]] = {}
    for path, parser in ALL:
        for action in options(parser):
            flag = action.option_strings[-1]
            if flag in FLAGS and action.default not in (None, False, [], argparse.SUPPRESS):
                defaults.setdefault(flag, {})[path] = action.default
    problems = []
    for flag, where in defaults.items():
        unexplained = {p: d for p, d in where.items() if p not in DEFAULTS_DIFFER.get(flag, {})}
        if len({repr(d) for d in unexplained.values()}) > 1:
            problems.append(f"{flag} defaults differ: {unexplained}; make them one or say why in "
                            f"vocabulary.DEFAULTS_DIFFER")
    # and a reason given for a subcommand that no longer differs is stale
    for flag, reasons in DEFAULTS_DIFFER.items():
        for path in reasons:
            assert path in dict(ALL), f"DEFAULTS_DIFFER names {path}, which is not a subcommand"
    assert problems == []


def test_inputs_and_outputs_have_different_names():
    problems = []
    for path, parser in ALL:
        for action in options(parser):
            flag, text = action.option_strings[-1], (action.help or "").lower()
            if flag == "--records" and re.search(r"\b(append|write)", text):
                problems.append(f"{path} --records writes ({text!r}): that is --records-out")
            if flag.endswith("-out") and flag != "--out" and re.search(r"\bread", text):
                problems.append(f"{path} {flag} reads ({text!r})")
            if flag == "--out" and "director" in text:
                problems.append(f"{path} --out is a directory ({text!r}): that is --out-dir")
            if flag in ("--out-dir", "--sweep-dir") and "director" not in text:
                problems.append(f"{path} --out-dir does not say it is a directory ({text!r})")
    assert problems == []


def test_choices_are_case_insensitive_everywhere():
    for path, parser in ALL:
        for action in parser._actions:
            if action.choices and not isinstance(action, argparse._SubParsersAction) and all(
                    isinstance(c, str) for c in action.choices):
                assert action.type is str.lower, f"{path} {action.option_strings or action.dest}"
    args = build_parser("predict").parse_args(["predict", "--precision", "FP16"])
    assert args.precision == "fp16"


def test_one_way_to_choose_vms():
    for old in ("--all-vms-only", "--subsets", "--nodes"):
        for path, parser in ALL:
            assert old not in {f for a in options(parser) for f in a.option_strings}, (path, old)
    for path in ("geosim predict", "geosim trace", "geosim sweep", "geosim live run", "geosim calibrate import"):
        assert "--hosts" in {f for a in options(dict(ALL)[path]) for f in a.option_strings}, path


def test_a_host_is_a_host_and_a_count_is_a_count():
    """One concept, one name (issue 34): hosts are "host" in every flag, never "vm" (--host-count,
    --gpus-per-host, --hosts-per-site), a number of things is "-count" (--host-count, --site-count),
    not "--num-"; the old names stay accepted as renamed flags, hidden from the help."""
    for path, parser in ALL:
        for action in options(parser):
            for flag in action.option_strings:
                assert "vm" not in flag and "devices-per" not in flag, (path, flag)
                assert not flag.startswith("--num-") or flag == "--num-processes", (path, flag)  # JAX's own name
    for path, flag in (("geosim plan", "--host-count"), ("geosim live wan up", "--host-count"),
                       ("geosim plan", "--gpus-per-host"), ("geosim sweep", "--gpus-per-host"),
                       ("geosim select", "--gpus-per-host"), ("geosim sweep", "--site-count"),
                       ("geosim sweep", "--hosts-per-site")):
        assert flag in {f for a in options(dict(ALL)[path]) for f in a.option_strings}, (path, flag)


def test_a_layout_is_asked_the_same_way_wherever_a_technique_takes_one():
    layout = {"--tensor-parallel", "--pipeline-parallel", "--data-parallel", "--virtual-stages", "--layer-split"}
    for path in ("geosim predict", "geosim trace"):
        assert layout <= {f for a in options(dict(ALL)[path]) for f in a.option_strings}, path


@pytest.mark.parametrize("argv, dest, value", [
    (["predict", "--all-vms-only"], "hosts", "all"),
    (["plan", "--measured", "study"], "records", "study"),
    (["select", "--measured", "study"], "records", "study"),
    (["sweep", "--subsets", "vm1"], "hosts", "vm1"),
    (["sweep", "--out", "d"], "out", "d"),
    (["sweep", "--replace-gpu", "A30"], "gpu", "A30"),
    (["sweep", "--out-dir", "d"], "out", "d"),
    (["report", "--out-dir", "d"], "out_dir", "d"),
    (["sweep", "--scale-gpu", "H100"], "scale_gpu", "H100"),
    (["live", "run", "--cpu-devices", "4"], "cpu_devices", 4),
    (["live", "run", "--hosts", "3"], "hosts", 3),
    (["live", "run", "--stages", "2"], "stages", 2),
    (["live", "run", "--records", "r.jsonl"], "record", "r.jsonl"),
    (["live", "run", "--nodes", "wan"], "hosts", "wan"),
    (["live", "validate", "--out", "d"], "out", "d"),
    (["calibrate", "import", "study", "--out", "r.jsonl"], "out", "r.jsonl"),
    (["plan", "--vms", "3"], "vms", 3),
    (["plan", "--gpus-per-vm", "4"], "gpus_per_vm", 4),
    (["select", "--devices-per-vm", "4"], "devices_per_vm", 4),
    (["sweep", "--num-sites", "2"], "num_sites", "2"),
    (["sweep", "--vms-per-site", "2"], "vms_per_site", "2"),
    (["sweep", "--gpus-per-vm", "4"], "gpus_per_vm", "4"),
    (["live", "wan", "up", "--num-hosts", "3"], "hosts", 3),
])
def test_a_renamed_flag_still_works_and_says_its_new_name(argv, dest, value, capsys):
    args = build_parser(argv[0]).parse_args(argv)
    assert getattr(args, dest) == value
    # the line waits for the command to run (an error then prints alone: geosim.cli._process.deferred_warnings)
    assert capsys.readouterr().err == ""
    from geosim.cli._process import deferred_warnings

    deferred_warnings(args)
    err = capsys.readouterr().err
    assert err.count("deprecated") == 1 and "use --" in err


def test_technique_takes_a_list_and_all_where_a_command_takes_several():
    for path in ("geosim predict", "geosim select", "geosim plan", "geosim sweep", "geosim trace", "geosim live run",
                 "geosim live validate", "geosim fabric calibrate"):
        action = next(a for a in options(dict(ALL)[path]) if "--technique" in a.option_strings)
        assert isinstance(action, CommaList), path
        assert "all" in action.help or "'all'" in (action.metavar or ""), path


def test_every_option_has_help():
    missing = [f"{path} {action.option_strings[-1]}" for path, parser in ALL for action in options(parser)
               if not action.help or action.help == argparse.SUPPRESS]
    assert missing == []


def test_help_defaults_are_the_codes():
    problems = []
    for path, parser in ALL:
        for action in options(parser):
            text, flag = action.help or "", action.option_strings[-1]
            quoted = re.search(r"default:? ([-\w.]+)", text)
            if action.default not in (None, False, "", argparse.SUPPRESS, []) and quoted and "%(default)s" not in text:
                problems.append(f"{path} {flag}: help quotes a default by hand ({quoted.group(0)!r}); "
                                f"use %(default)s (the code's is {action.default!r})")
            said = re.search(r"\(default[^)]*\)", text)
            if flag in WORKLOAD_DEFAULTS and action.default is None and said and re.search(r"\d", said.group(0)):
                if str(WORKLOAD_DEFAULTS[flag]) not in re.findall(r"[\w.]+", said.group(0)):
                    problems.append(f"{path} {flag}: help says {said.group(0)}, the workload's default is "
                                    f"{WORKLOAD_DEFAULTS[flag]}")
    assert problems == []


def test_help_renders_for_every_subcommand():
    for path, parser in ALL:
        assert parser.format_help()  # a bad %(...)s in any help text raises here


@pytest.mark.parametrize("path", ["geosim predict", "geosim select", "geosim plan", "geosim sweep", "geosim report",
                                  "geosim trace", "geosim models", "geosim calibrate import", "geosim calibrate fit",
                                  "geosim calibrate crossval"])
def test_commands_that_print_results_take_json(path):
    parser = dict(ALL)[path]
    assert "--json" in {f for a in options(parser) for f in a.option_strings}


def test_technique_is_repeatable_and_comma_separated_where_a_command_takes_several():
    for path in ("geosim predict", "geosim plan", "geosim sweep", "geosim live validate"):
        parser = dict(ALL)[path]
        action = next(a for a in options(parser) if "--technique" in a.option_strings)
        assert isinstance(action, CommaList), path
        args = [a for a in ("--technique", "data,zero2", "--technique", "shard")]
        namespace = argparse.Namespace(**{action.dest: None})
        for flag, value in zip(args[::2], args[1::2]):
            action(parser, namespace, value, flag)
        assert getattr(namespace, action.dest) == ["data", "zero2", "shard"]


def test_the_cli_reference_is_generated_from_these_definitions():
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "tools" / "cli_reference.py"), "--check"], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr


# Words that name one concept two ways: a flag written with either is the same concept, so two flags of
# the reference that differ only by them are one concept under two names (issue 34)
SYNONYMS = [(r"\bvms?\b", "host"), (r"\bnodes?\b", "host"), (r"\bhosts\b", "host"), (r"\bdevices\b", "gpus"),
            (r"\bcpu-gpus\b", "gpus-per-host"), (r"^num-(.+)$", r"\1-count"), (r"\b(replace|scale)-gpu\b", "gpu"),
            (r"\bmeasured\b", "records"), (r"\bsubsets\b", "host")]


def concept(flag: str) -> str:
    name = flag.removeprefix("--")
    for pattern, word in SYNONYMS:
        name = re.sub(pattern, word, name)
    return name


def reference_flags() -> dict[str, set[str]]:
    """flag -> the commands whose table in docs/reference/cli.md lists it (the renamed-flags table apart)."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "cli.md").read_text()
    found: dict[str, set[str]] = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title = section.splitlines()[0]
        if not title.startswith("geosim "):
            continue
        for row in re.findall(r"^\| `([^`]+)` \|", section, flags=re.M):
            for flag in re.findall(r"--[a-z0-9-]+", row):
                found.setdefault(flag, set()).add(title)
    return found


def test_the_reference_has_no_concept_under_two_names():
    by_concept: dict[str, set[str]] = {}
    for flag in reference_flags():
        by_concept.setdefault(concept(flag), set()).add(flag)
    twice = {c: sorted(flags) for c, flags in by_concept.items() if len(flags) > 1}
    assert twice == {}, f"one concept, several flags in docs/reference/cli.md: {twice}"
    # and no flag of the reference is an old name kept for now (but the names whose old use moved to
    # another flag while they keep one meaning: --hosts, --records, --out, --out-dir, --gpu)
    old = {f for names in RENAMED for f in re.findall(r"--[a-z0-9-]+", names)} - {"--hosts", "--records", "--out",
                                                                                   "--out-dir", "--gpu"}
    assert old.isdisjoint(reference_flags()), sorted(old & set(reference_flags()))


def test_the_concepts_the_issue_named_have_one_flag_each():
    """Issue 34's list: a host count, devices per host, the GPU model, a sweep's grid of sites."""
    flags = reference_flags()
    for gone in ("--vms", "--num-hosts", "--gpus-per-vm", "--devices-per-vm", "--cpu-devices", "--replace-gpu",
                 "--scale-gpu", "--nodes", "--num-sites", "--vms-per-site", "--measured", "--subsets"):
        assert gone not in flags, gone
    assert {"geosim plan", "geosim live wan up", "geosim live run"} <= flags["--host-count"]
    assert {"geosim select", "geosim plan", "geosim sweep", "geosim live run", "geosim live validate",
            "geosim fabric calibrate"} <= flags["--gpus-per-host"]


def test_a_layout_is_asked_the_same_way_in_every_command_that_takes_a_technique_layout():
    layout = {"--tensor-parallel", "--pipeline-parallel", "--data-parallel", "--virtual-stages", "--layer-split",
              "--replica-per"}
    for path in ("geosim predict", "geosim trace", "geosim plan", "geosim select", "geosim sweep",
                 "geosim calibrate import"):
        assert layout <= {f for a in options(dict(ALL)[path]) for f in a.option_strings}, path
        actions = {f: a for a in options(dict(ALL)[path]) for f in a.option_strings}
        assert {signature(actions[f]) for f in layout - {"--layer-split", "--replica-per"}} == {"int"}, path
        assert tuple(actions["--replica-per"].choices) == ("host", "site"), path


@pytest.mark.parametrize("old, new", [("--num-hosts", "--host-count"), ("--vms", "--hosts"), ("--nodes", "--hosts"),
                                      ("--gpus-per-vm", "--gpus-per-host"), ("--devices-per-vm", "--gpus-per-host"),
                                      ("--cpu-devices", "--gpus-per-host"), ("--replace-gpu", "--gpu"),
                                      ("--scale-gpu", "--gpu"), ("--vms-per-site", "--hosts-per-site")])
def test_the_two_names_the_issue_found_read_as_one_concept(old, new):
    """What test_the_reference_has_no_concept_under_two_names would catch, were the old name listed again."""
    assert concept(old) == concept(new)
