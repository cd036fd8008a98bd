"""The flag vocabulary: one meaning per flag name, in every subcommand (calibrate and live included).

tests/test_cli_vocabulary.py walks every subcommand's argparse definition and fails on a flag that
is not in FLAGS but appears in two subcommands, on a FLAGS entry used with another kind of value
than the one written here, on an option without help, and on a help default that is not the
code's. tools/cli_reference.py prints this table into docs/reference/cli.md.

A kind is what the flag takes: "list" flags are repeatable AND comma-separated (CommaList);
"spec" flags take geosim.units' range syntax where a command sweeps, one value elsewhere.
"""

from __future__ import annotations

import argparse

# flag -> (kind, meaning)
FLAGS: dict[str, tuple[str, str]] = {
    "--scenario": ("list|one", "the slice: a built-in scenario name or a scenario file (repeatable where a "
                               "command takes several)"),
    "--model": ("one|spec", "a model from the catalog (`geosim models`) or the scenario"),
    "--params": ("one", "simulator parameters file (default: the shipped defaults)"),
    "--network": ("one", "the network model the simulation runs: tcp, alpha-beta or ideal"),
    "--technique": ("list|one", "technique name(s); repeatable and comma-separated where a command takes several"),
    "--hosts": ("one", "VMs of the slice to use, comma-separated names (default: all)"),
    "--global-batch": ("int|spec", "sequences per optimizer step, summed over all GPUs"),
    "--microbatches": ("int|spec", "microbatches per step (pipeline stages; gradient accumulation elsewhere)"),
    "--epochs": ("int|spec", "passes over the data set to train"),
    "--steps": ("int", "training steps"),
    "--seq-len": ("int", "tokens per sequence"),
    "--tokens-per-epoch": ("int", "data set size in tokens"),
    "--precision": ("one", "number format: fp16, bf16, fp32 (mixed precision keeps fp32 master weights)"),
    "--rtt-ms": ("float|spec", "round-trip time of the WAN links, milliseconds (a list or range where a command sweeps)"),
    "--bandwidth-gbps": ("float|spec", "bandwidth of the WAN links, Gbit/s (a list or range where a command sweeps)"),
    "--workers": ("int", "parallel worker processes"),
    "--records": ("one", "run-records file (JSON Lines, geosim.run/1) to read or append to"),
    "--json": ("flag", "print the results as JSON instead of tables"),
    "--out": ("one", "file or directory to write"),
    "--delta": ("float", "Algorithm 1's threshold: the relative TFLOP/s gap that decides"),
    "--measured": ("one", "run records to use instead of predictions ('study': the study's measurements)"),
    "--sweep-rtt": ("spec", "redo the answer at these RTTs (ms) and show where it flips"),
    "--probe-epochs": ("int", "epochs each Algorithm 1 probe trains (the algorithm's epsilon)"),
    "--ray-address": ("one", "a Ray cluster to run on ('auto': the local one)"),
    "--timeout": ("float", "seconds before a run is stopped"),
    "--seconds": ("float", "seconds a measurement lasts"),
    "--cpu-devices": ("int", "virtual CPU devices per process (JAX on CPU)"),
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
    "--gpu": ("one", "a GPU model from the catalog (sweep: a GPU spec)"),
    "--sites": ("one", "FABRIC sites, comma-separated, or 'all'"),
    "--gpus-per-vm": ("int|spec", "GPUs per VM (a list or range where a command sweeps)"),
    "--image": ("one", "the VMs' operating-system image"),
    "--runtime": ("one|spec", "the software stack whose fixed costs apply: alpa (the study's), jax (geosim live), "
                              "pytorch (DDP); a list where a command sweeps"),
    "--draws": ("int", "parameter draws from the fit's covariance: the range of an answer and how often it wins"),
}


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
