"""The flag vocabulary: one meaning per flag name, in every subcommand (calibrate and live included).

tests/test_cli_vocabulary.py walks every subcommand's argparse definition and fails on a flag that
is not in FLAGS but appears in two subcommands, on a FLAGS entry used with another kind of value
than the one written here, on a flag whose default differs between subcommands (unless DEFAULTS_DIFFER
says why), on an option without help, and on a help default that is not the code's.
tools/cli_reference.py prints this table into docs/reference/cli.md.

Names: a flag that reads a file is named for what it reads (--records, --params, --scenario); the
flag that writes one ends in -out (--records-out, --loss-curve-out); --out is a file to write and
--out-dir a directory. A renamed flag keeps its old name for now (RENAMED; add_renamed below): it
works, prints one deprecation line, and is listed in the reference, not in the help.

A kind is what the flag takes: "list" flags are repeatable AND comma-separated (CommaList);
"spec" flags take geosim.base.units' range syntax where a command sweeps, one value elsewhere.
"""

from __future__ import annotations

import argparse

# flag -> (kind, meaning)
FLAGS: dict[str, tuple[str, str]] = {
    "--scenario": ("list|one", "the slice: a built-in scenario name or a scenario file (repeatable where a "
                               "command takes several)"),
    "--model": ("one|spec", "a model from the catalog (`geosim models`) or the scenario"),
    "--model-config": ("one", "a Hugging Face config.json (Llama, Qwen2, Mistral, Mixtral, DeepSeek-MoE, GPT-2, "
                              "GPT-NeoX): the model's shape, named for its file (instead of --model)"),
    "--memory-parts": ("flag", "print each row's fullest GPU's memory by part: weights, master copy, gradients, "
                               "optimizer, activations, the backward's transient, workspace"),
    "--params": ("one", "simulator parameters file (default: the shipped defaults)"),
    "--network": ("one", "the network backend the simulation runs: fabric (each link by its transport: NVLink, RDMA, TCP), tcp, alpha-beta or ideal"),
    "--technique": ("list|one", "technique name(s), repeatable and comma-separated; 'all': every technique the "
                                "command can run"),
    "--hosts": ("one|_hosts_value", "which VMs of the slice: names joined by + (vm1+vm2: those together), 'all' (all "
                                    "together), 'each' (each alone), comma-separated for several sets (live run: 'wan', "
                                    "the emulated WAN slice's hosts)"),
    "--global-batch": ("int|spec", "sequences per optimizer step, summed over all GPUs"),
    "--microbatches": ("int|spec", "microbatches per step (pipeline stages; gradient accumulation elsewhere)"),
    "--epochs": ("int|spec", "passes over the data set to train"),
    "--steps": ("int", "training steps"),
    "--seq-len": ("int", "tokens per sequence"),
    "--tokens-per-epoch": ("int", "data set size in tokens"),
    "--remat": ("flag", "activation checkpointing (Alpa's remat): keep each block's input, recompute the rest "
                        "in the backward (less memory, a third more forward compute)"),
    "--precision": ("one", "number format: fp16, bf16, fp32 (mixed precision keeps fp32 master weights)"),
    "--rtt-ms": ("float|spec", "round-trip time of the WAN links, milliseconds (a list or range where a command sweeps)"),
    "--bandwidth-gbps": ("float|spec", "bandwidth of the WAN links, Gbit/s (a list or range where a command sweeps)"),
    "--workers": ("int", "parallel worker processes"),
    "--records": ("one", "run-records file (JSON Lines, geosim.run/1) to read ('study': the study's measurements, "
                         "where a command takes them)"),
    "--records-out": ("one", "run-records file (JSON Lines, geosim.run/1) to append the runs to (calibrate import: "
                             "to write)"),
    "--json": ("flag", "print the results as JSON instead of tables"),
    "--time-limit": ("one", "wall time after which a question stops with one line, exit 2 (a duration, or none)"),
    "--out": ("one", "file to write"),
    "--out-dir": ("one", "directory to write into (a rerun resumes or replaces what is there, as the command says)"),
    "--sweep-dir": ("one", "a sweep's directory: sweep writes its rows there (a rerun resumes them), report reads them "
                           "and writes its plots and page beside them"),
    "--delta": ("float", "Algorithm 1's threshold: the relative TFLOP/s gap that decides"),
    "--sweep-rtt": ("spec", "redo the answer at these RTTs (ms) and show where it flips"),
    "--probe-epochs": ("int", "epochs each Algorithm 1 probe trains (the algorithm's epsilon)"),
    "--ray-address": ("one", "a Ray cluster to run on ('auto': the local one)"),
    "--timeout": ("float", "seconds before a run is stopped"),
    "--seconds": ("float", "seconds a measurement lasts"),
    "--warmup": ("int", "steps after the first excluded from timing"),
    "--data": ("one", "training data"),
    "--max-evaluations": ("int", "least-squares iterations per fit"),
    "--step-rtts": ("one", "what the collective step's round trips are fitted as"),
    "--also": ("one", "extra parameters to fit, comma-separated keys"),
    "--overhead": ("one", "how the per-iteration overhead is fitted"),
    "--plot": ("one", "image file to write"),
    "--tcp-window-kib": ("float", "TCP window cap, KiB"),
    "--count": ("int", "how many samples"),
    "--all": ("flag", "everything, not only the default selection"),
    "--name": ("one", "a name for what is written"),
    "--kind": ("one", "which variant"),
    "--quiet": ("flag", "no progress output"),
    "--dry-run": ("flag", "print what would be requested and run; do nothing"),
    "--gpu": ("one", "a GPU model from the catalog (RTX6000, T4, A30, H100, ...): fabric: only slices of it; sweep: "
                     "every host's, a what-if axis (the generated clusters' with --site-count)"),
    "--sites": ("one", "FABRIC sites, comma-separated, or 'all'"),
    "--gpus-per-host": ("int|spec", "GPUs per host (a list or range where a command sweeps; live runs and select "
                                    "--live: the virtual CPU devices of a process, standing for them)"),
    "--host-count": ("int", "how many hosts (VMs): of a FABRIC slice to rank (plan --sites), of an emulated WAN, "
                            "of a Ray cluster's nodes to run on (live run)"),
    "--image": ("one", "the VMs' operating-system image"),
    "--runtime": ("one|spec", "the software stack whose fixed costs apply: alpa (the study's), jax (geosim live), "
                              "pytorch (DDP); a list where a command sweeps"),
    "--draws": ("int", "parameter draws from the fit's covariance: the range of an answer and how often it wins"),
    "--target-tokens": ("one", "the training progress to rank on: as far as Data gets in N tokens ('chinchilla': 20 "
                               "per parameter; default: the workload's tokens)"),
    "--token-efficiency": ("append", "override a technique's token efficiency, TECHNIQUE=VALUE (Data's tokens / its "
                                     "tokens for the same loss); repeatable"),
    "--loss-curves": ("one", "loss-vs-tokens curves (JSON Lines, from live run --loss-curve-out): measured token "
                             "efficiencies"),
    "--tensor-parallel": ("int", "layout: GPUs of a tensor-parallel group, inside a host (t; default 1)"),
    "--pipeline-parallel": ("int", "layout: pipeline stages (p; default: one per host)"),
    "--data-parallel": ("int", "layout: data-parallel replicas of each stage (d; default: the GPUs asked / t / p)"),
    "--virtual-stages": ("int", "layout: chunks of layers per stage under the interleaved 1F1B schedule (v; "
                                "default 1)"),
    "--expert-parallel": ("int", "layout of a mixture of experts (data): its experts split over groups of N consecutive "
                                 "GPUs inside a site, two all-to-alls per MoE layer each way (never across a WAN link)"),
    "--layer-split": ("one", "layout: layers of each stage (of each virtual stage when interleaved), comma-separated"),
    "--replica-per": ("one", "layout of a low-communication technique: what trains one replica, a host or a site "
                             "(the hosts asked at a site, data parallel)"),
    "--loss-curve-out": ("one", "file to append the run's loss-vs-tokens curve to (for --loss-curves)"),
}

# Where one flag has different defaults on purpose: flag -> {subcommand: why}. The vocabulary test
# accepts a differing default only when the subcommand is named here; cli.md prints the reasons.
DEFAULTS_DIFFER: dict[str, dict[str, str]] = {
    "--model": {
        "geosim live run": "live runs train on this machine's CPU: a model that trains in seconds",
        "geosim live validate": "small-wan: a model whose gradients outweigh its activations (as gpt2m's do) and "
                                "that trains on CPU",
        "geosim fabric calibrate": "the calibration runs on the slice start small; gpt2m on real GPUs",
        "geosim calibrate import": "the file's model, for importers whose files say which",
    },
    "--global-batch": {
        "geosim live run": "a CPU-sized batch for the live runs (the simulator's workload is 32 sequences)",
        "geosim live validate": "as live run",
        "geosim fabric calibrate": "as live run",
    },
    "--microbatches": {
        "geosim live run": "live runs accumulate no microbatches unless asked",
        "geosim live validate": "as live run",
    },
    "--precision": {"geosim live run": "auto: what the device supports (fp32 on CPU)"},
    "--bandwidth-gbps": {
        "geosim sweep": "a sweep axis: 'native' keeps each slice's own links",
        "geosim live validate": "the emulated WAN's rate: 1 Gbit/s keeps a Python forwarder on one core",
    },
    "--rtt-ms": {
        "geosim sweep": "a sweep axis: 'native' and the RTTs of the study's range",
        "geosim live validate": "the emulated WAN's RTTs the validation runs at",
        "geosim live wan up": "the emulated WAN's RTT",
    },
    "--scenario": {"geosim trace": "trace one slice; the study's UTAH-GPN by default"},
    "--technique": {
        "geosim trace": "trace one technique by default: the pipeline, whose timeline shows most",
        "geosim live run": "one run of Data by default",
    },
    "--steps": {
        "geosim live validate": "each validation run's steps",
        "geosim fabric calibrate": "each calibration run's steps",
    },
    "--gpus-per-host": {
        "geosim sweep": "the sweep generates scaled-out clusters of 8-GPU VMs (a DGX-like node); plan --sites "
                        "asks FABRIC for VMs of 2 GPUs, as in the study",
        "geosim live validate": "one CPU device per emulated host: every host shares this machine's cores",
    },
    "--data": {"geosim live validate": "generated tokens: offline and the same on every run"},
    "--timeout": {"geosim live validate": "seconds per validation run"},
    "--max-evaluations": {"geosim live validate": "its fit has fewer parameters and a profiled grid"},
    "--also": {"geosim calibrate crossval": "the held-out fits free what the cross-validation found worth it"},
    "--overhead": {"geosim calibrate crossval": "one overhead shared by the techniques, so a held-out technique "
                                                "has one"},
    "--step-rtts": {"geosim calibrate crossval": "one global value, so a held-out slice has one"},
    "--plot": {"geosim calibrate crossval": "the cross-validation always draws its figure"},
    "--ray-address": {"geosim live probe": "probing needs a cluster: the local one by default"},
    "--tcp-window-kib": {"geosim live validate": "the study's mechanism: windows smaller than the gradients"},
    "--hosts": {"geosim predict": "all the VMs together, and each alone"},
}

# Old name -> new name; the old name still works for now and prints one deprecation line
RENAMED: dict[str, str] = {
    "--measured": "--records",
    "--all-vms-only": "--hosts all",
    "--subsets": "--hosts",
    "--nodes": "--hosts",
    "select/live run --records (writing)": "--records-out",
    "calibrate import --out": "--records-out",
    "sweep --out, --out-dir": "--sweep-dir",
    "live validate --out": "--out-dir",
    "report DIR (positional), --out-dir": "--sweep-dir",
    "calibrate fit/crossval/check RECORDS (positional)": "--records",
    "fabric slice create/emulate SCENARIO (positional)": "--scenario",
    "sweep --replace-gpu, --scale-gpu": "--gpu",
    "plan --vms": "--host-count",
    "live wan up --num-hosts": "--host-count",
    "live run --hosts N (a number of Ray nodes)": "--host-count",
    "live run/validate, fabric calibrate --cpu-devices": "--gpus-per-host",
    "live run --stages": "--pipeline-parallel",
    "plan/sweep --gpus-per-vm, select --devices-per-vm": "--gpus-per-host",
    "sweep --num-sites": "--site-count",
    "sweep --vms-per-site": "--hosts-per-site",
}


class OneLineErrors(argparse.ArgumentParser):
    """A parser whose mistakes are one line naming the command, the flag and what is wrong (exit 2),
    not the usage block first: `--help` shows the usage."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class CommaList(argparse.Action):
    """A repeatable option whose values may also be comma-separated: --technique a,b --technique c."""

    def __call__(self, parser, namespace, values, option_string=None):
        items = [v.strip() for v in str(values).split(",")]
        if not all(items):
            parser.error(f"{option_string}: empty name in {values!r}")
        current = getattr(namespace, self.dest, None)
        current = [] if current is None or current is self.default else list(current)
        setattr(namespace, self.dest, list(dict.fromkeys(current + items)))


def meaning(flag: str) -> str:
    return FLAGS[flag][1]


class RenamedFlag(argparse.Action):
    """An old flag name kept for now: it stores into the new flag's destination (or `value`, for an
    old switch) and prints one deprecation line. Hidden from the help; listed in cli.md."""

    def __init__(self, option_strings, dest, new: str, value=None, **kwargs):
        self.new, self.value = new, value
        super().__init__(option_strings, dest, nargs=0 if value is not None else None, help=argparse.SUPPRESS,
                         **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        deprecate(namespace, f"{option_string} is deprecated; use {self.new}")
        setattr(namespace, self.dest, self.value if self.value is not None else values)


def deprecate(args, what: str) -> None:
    """A deprecation line for this command, printed once it has run (geosim.cli._process.deferred_warnings):
    a command that fails prints its error alone, one line."""
    pending = list(getattr(args, "_deprecations", None) or [])
    pending.append(f"geosim: warning: {what}")
    setattr(args, "_deprecations", pending)


def add_renamed(parser, old: str, new: str, dest: str, value=None, **kwargs) -> None:
    """Keep `old` working for `new` (RENAMED), storing into `dest`."""
    parser.add_argument(old, action=RenamedFlag, dest=dest, new=new, value=value, default=argparse.SUPPRESS,
                        **kwargs)


def lower_choices(parser: argparse.ArgumentParser) -> None:
    """Choices are case-insensitive everywhere (--precision FP16 as --scenario UTAH-GPN): every option
    and positional with lowercase string choices lowercases what it is given."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                lower_choices(sub)
            continue
        choices = action.choices
        if choices and action.type is None and all(isinstance(c, str) and c == c.lower() for c in choices):
            action.type = str.lower
