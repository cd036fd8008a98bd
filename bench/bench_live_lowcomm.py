"""Live DiLoCo and SparseLoCo against Data: loss against tokens, the measured token
efficiency, and (root, emulated WAN) DiLoCo's step time at 0.1 ms vs 40 ms RTT.

    python bench/bench_live_lowcomm.py                       # data, diloco, sparseloco: 300 steps, seeds 0,1,2 (~7 min)
    python bench/bench_live_lowcomm.py --steps 100 --technique data,diloco --seeds 0 --held-out 0
    python bench/bench_live_lowcomm.py --wan                 # + the WAN timing (root; `geosim live run --hosts wan`)
    python bench/bench_live_lowcomm.py --wan-only

Every run is a `geosim live run` subprocess on the tiny model, the shipped generated corpus
(bytes tokens), the same seed, so every technique sees the same batches in the same order
(DiLoCo's replicas split each of Data's batches between them). Each run appends its record
to OUT/runs.jsonl and its loss-vs-tokens curve to OUT/curves-seed{S}.jsonl and, all seeds
pooled, OUT/curves.jsonl (`--loss-curve-out`: the loss of the synchronized model every
--window steps; see live/experiments/token_efficiency.py); the plot goes to --plot, the figures (per
seed, their mean, pooled) to OUT/summary.json. The token-efficiency factor is
geosim.studies.convergence's: tokens Data needs to reach the lowest loss both curves reach / tokens
the technique needs; `geosim predict --loss-curves OUT/curves.jsonl` uses it.

--held-out N (default 256): the same settings once more in-process, trained without the
corpus's last N sequences, with the loss of the *synchronized* parameters on those N
measured every H steps (DiLoCo: the model right after each outer step; the training loss
above comes from the replicas mid-round). Curves to OUT/curves-eval.jsonl (same format),
factors in summary.json under "held_out", the plot's right panel.

--wan: for each RTT in --wan-rtts (default 0.1,40), bring up a 2-host emulated slice of our own (its own
GEOSIM_WAN_STATE, so a slice someone else has up is left alone), run DiLoCo and Data with
one process per host (`--hosts wan`, 1 CPU device each: a replica per host; H =
--wan-inner-steps, default 100), take it down. The time compared is the mean step time over whole DiLoCo rounds (the sync steps
included; the record's median would leave them out). Pass: DiLoCo at the largest RTT
within 20% of its time at the smallest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from geosim.studies import convergence  # noqa: E402

PY = os.environ.get("GEOSIM_PYTHON", sys.executable)


def geosim(*argv, env=None, timeout=1800, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run([PY, "-m", "geosim", *map(str, argv)], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)
    if check and proc.returncode != 0:
        raise SystemExit(f"geosim {' '.join(map(str, argv))} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


BASELINE = "data"  # the technique every token efficiency is measured against (convergence's default baseline)
# the live run's flags each measured technique takes from this script's arguments (the baseline: none)
LOWCOMM_FLAGS = {
    "diloco": lambda a: ["--inner-steps", a.inner_steps, "--outer-lr", a.outer_lr, "--outer-momentum", a.outer_momentum],
    "sparseloco": lambda a: ["--inner-steps", a.inner_steps, "--topk", a.topk, "--bits", a.bits,
                             "--outer-lr", a.sparse_outer_lr, "--outer-momentum", 0],
}


def lowcomm_flags(technique: str, args) -> list:
    return LOWCOMM_FLAGS.get(technique, lambda a: [])(args)


def common_flags(args) -> list:
    return ["--model", "tiny", "--global-batch", args.batch, "--lr", args.lr, "--seed", args.seed, "--data", "generated",
            "--tokenizer", "bytes", "--log-every", max(1, args.steps // 5)]


def last_line(path: Path) -> dict:
    return json.loads(path.read_text().splitlines()[-1])


def train_curves(args, out: Path) -> dict:
    """One seed (args.seed): a `geosim live run` per technique -> OUT/curves-seed{S}.jsonl
    (and appended to OUT/curves.jsonl, all seeds pooled, as `geosim predict` pools them)."""
    curves, runs = out / f"curves-seed{args.seed}.jsonl", out / "runs.jsonl"
    curves.unlink(missing_ok=True)
    rows = {}
    for technique in args.techniques:
        t0 = time.time()
        geosim("live", "run", "--technique", technique, "--steps", args.steps, *common_flags(args),
               "--gpus-per-host", args.cpu_devices, *lowcomm_flags(technique, args),
               "--records-out", runs, "--loss-curve-out", curves, "--loss-curve-window", args.window)
        doc = last_line(curves)
        with open(out / "curves.jsonl", "a") as f:
            f.write(json.dumps(doc) + "\n")
        rows[technique] = {"run_id": doc["run_id"], "final_curve_loss": doc["loss_curve"][-1][1],
                           "first_loss": doc["losses"][0], "tokens": doc["loss_curve"][-1][0],
                           "mean_step_time_s": doc["mean_step_time_s"], "wall_s": round(time.time() - t0, 1),
                           "options": doc.get("options")}
        print(f"seed {args.seed} {technique:<11} loss {doc['losses'][0]:.4f} -> {doc['loss_curve'][-1][1]:.4f} (curve's "
              f"last point) at {doc['loss_curve'][-1][0]} tokens, {rows[technique]['wall_s']} s", flush=True)
    result = {"runs": rows}
    if BASELINE in rows and len(rows) > 1:
        eff, target = factors(curves)
        result["token_efficiency"] = eff
        result["target_loss"] = target
        # also each technique against Data alone (the target: the lowest loss both reach)
        pairs = {}
        all_curves = convergence.read_loss_curves(curves)
        for t in rows:
            if t != BASELINE:
                pair = {BASELINE: all_curves[BASELINE], t: all_curves[t]}
                target_t = max(min(loss for _, loss in c) for c in pair.values())
                pairs[t] = {"target_loss": target_t,
                            "efficiency": convergence.measured_efficiencies(pair, target_t)[t]}
        result["pairwise"] = pairs
        print(f"token efficiency at loss {target:.4f} (the lowest loss every curve reaches): "
              + ", ".join(f"{t} {v:.3f}" for t, v in sorted(eff.items())))
        for t, p in pairs.items():
            print(f"  {t} vs data alone, at loss {p['target_loss']:.4f}: {p['efficiency']:.3f}")
    return result


EVAL_WORKER = r"""
import json, sys, time
import jax, numpy as np
from geosim.live.train import corpus
from geosim.live.train.model import GPTConfig, init_params, loss_fn, optimizer
from geosim.live.train.techniques import Setup, get
from geosim.live.train.techniques.diloco import DiLoCo
from geosim.live.train.techniques.sparseloco import SparseLoCo

a = json.loads(sys.argv[1])
data = corpus.load("generated", 64, "bytes", a["seed"])
held = data.sequences[-a["held_out"]:]
data.sequences = data.sequences[:-a["held_out"]]  # trained on the rest only
cfg = GPTConfig(2, 64, 4, data.vocab, 64)
setup = Setup(cfg, optimizer(a["lr"]), a["batch"])
t = {"data": lambda: get("data", setup),
     "diloco": lambda: DiLoCo(setup, inner_steps=a["inner_steps"], outer_lr=a["outer_lr"], outer_momentum=a["outer_momentum"]),
     "sparseloco": lambda: SparseLoCo(setup, inner_steps=a["inner_steps"], topk_fraction=a["topk"], bits=a["bits"],
                                      outer_lr=a["sparse_outer_lr"], outer_momentum=0.0)}[a["technique"]]()
evaluate = jax.jit(lambda p, b: loss_fn(cfg, p, b))
state = t.init(init_params(cfg, a["seed"]))
curve = [[0, float(evaluate(jax.device_get(t.full_params(state)), held))]]
every = a["inner_steps"]
for step in range(a["steps"]):
    state, loss = t.step(state, t.place_batch(data.batch(step, a["batch"], a["seed"])))
    if (step + 1) % every == 0:  # DiLoCo: right after a sync, the params every replica holds
        curve.append([(step + 1) * a["batch"] * 64, float(evaluate(jax.device_get(t.full_params(state)), held))])
print(json.dumps({"technique": a["technique"], "loss": f"held-out loss ({a['held_out']} sequences) of the synchronized params",
                  "loss_curve": curve}))
"""


def eval_curves(args, out: Path) -> dict:
    """The same runs in-process, minus --held-out sequences kept aside: the held-out loss of the
    synchronized parameters every H steps (for DiLoCo: the model after each outer step, not
    the replicas' mid-round training loss)."""
    path = out / f"curves-eval-seed{args.seed}.jsonl"
    path.unlink(missing_ok=True)
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={args.cpu_devices}", "JAX_PLATFORMS": "cpu"}
    for technique in args.techniques:
        cfg = {k: getattr(args, k) for k in ("steps", "batch", "lr", "seed", "inner_steps", "outer_lr", "outer_momentum",
                                             "topk", "bits", "sparse_outer_lr", "held_out")}
        proc = subprocess.run([PY, "-c", EVAL_WORKER, json.dumps({**cfg, "technique": technique})], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=1800)
        if proc.returncode:
            raise SystemExit(f"eval run of {technique} failed:\n{proc.stderr[-3000:]}")
        doc = json.loads(proc.stdout.strip().splitlines()[-1])
        with open(path, "a") as f:
            f.write(json.dumps(doc) + "\n")
        print(f"seed {args.seed} {technique:<11} held-out loss {doc['loss_curve'][0][1]:.4f} -> "
              f"{doc['loss_curve'][-1][1]:.4f}", flush=True)
    result = {"final_loss": {}}
    for line in path.read_text().splitlines():
        doc = json.loads(line)
        result["final_loss"][doc["technique"]] = doc["loss_curve"][-1][1]
    if BASELINE in args.techniques and len(args.techniques) > 1:
        eff, target = factors(path)
        result.update(token_efficiency=eff, target_loss=target)
        print(f"held-out token efficiency at loss {target:.4f}: " + ", ".join(f"{t} {v:.3f}" for t, v in sorted(eff.items())))
    return result


def factors(curves: Path):
    parsed = convergence.read_loss_curves(curves)
    target = max(min(loss for _, loss in c) for c in parsed.values())
    return convergence.measured_efficiencies(parsed, target), target


def plot(out: Path, seeds: list[int], path: Path, title: str, summary: dict, held_out: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {"data": "black", "diloco": "tab:blue", "sparseloco": "tab:orange"}
    panels = [("curves", "curves-seed{}.jsonl", "loss of the model each round starts from, on its next batch\n"
               "(geosim live run --loss-curve-out; trailing mean of 5 samples)")]
    if held_out:
        panels.append(("held_out", "curves-eval-seed{}.jsonl", "held-out loss of the synchronized parameters\n"
                       "(256 sequences kept out of training, after every H steps)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels), 5.0), dpi=110, squeeze=False)
    for ax, (key, pattern, subtitle) in zip(axes[0], panels):
        mean_eff = summary.get(key, {}).get("token_efficiency_mean", {})
        by_seed = summary.get(key, {}).get("token_efficiency_by_seed", {})
        for i, seed in enumerate(seeds):
            f = out / pattern.format(seed)
            if not f.exists():
                continue
            for line in f.read_text().splitlines():
                doc = json.loads(line)
                t, loss = zip(*doc["loss_curve"][1:])
                label = None
                if i == 0:
                    label = doc["technique"]
                    o = doc.get("options") or {}
                    if o:
                        label += f" (H={o['inner_steps']}" + (f", top-k {o['topk_fraction']:g}, {o['bits']}-bit"
                                                              if "topk_fraction" in o else "") + ")"
                    if doc["technique"] in mean_eff and doc["technique"] != BASELINE:
                        label += (f": efficiency {mean_eff[doc['technique']]:.2f} (seeds: "
                                  + ", ".join(f"{v:.2f}" for v in by_seed[doc["technique"]]) + ")")
                ax.plot(t, loss, color=styles.get(doc["technique"]), linewidth=1.6 if i == 0 else 0.9,
                        alpha=1.0 if i == 0 else 0.45, label=label)
        ax.set_xlabel("tokens")
        ax.set_ylabel("loss")
        ax.set_title(subtitle + f"; bold: seed {seeds[0]}, faint: seeds " + ", ".join(map(str, seeds[1:])), fontsize=8.5)
        ax.legend(fontsize=7.5)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    from geosim.report.figures import LAYOUT, save_png

    save_png(fig, path, dpi=110)  # >= 1200 px wide; its text checked for overlaps on the renderer
    plt.close(fig)
    overlaps = LAYOUT[str(path)]["overlaps"]
    print(f"wrote {path}" + (f" (overlapping labels: {overlaps})" if overlaps else ""))


def wan_timing(args, out: Path) -> dict:
    if os.geteuid() != 0:
        raise SystemExit("--wan needs root (network namespaces)")
    state = str(out / "wan-state.json")
    env = {**os.environ, "GEOSIM_WAN_STATE": state}
    curves = out / "wan-curves.jsonl"
    curves.unlink(missing_ok=True)
    rows = []
    wan_args = argparse.Namespace(**{**vars(args), "inner_steps": args.wan_inner_steps})
    for rtt in args.wan_rtts:
        geosim("live", "wan", "up", "--rtt-ms", rtt, "--host-count", 2, "--ttl-s", 1800, env=env)
        try:
            for technique in args.wan_techniques:
                t0 = time.time()
                proc = geosim("live", "run", "--hosts", "wan", "--technique", technique, "--steps", args.wan_steps,
                              *common_flags(args), "--gpus-per-host", 1, *lowcomm_flags(technique, wan_args),
                              "--records-out", out / "wan-runs.jsonl", "--loss-curve-out", curves,
                              "--loss-curve-window", args.wan_inner_steps, env=env, check=False)
                if proc.returncode != 0:
                    print(f"rtt {rtt} ms {technique}: failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
                    rows.append({"rtt_ms": rtt, "technique": technique, "status": "failed"})
                    continue
                doc = last_line(curves)
                row = {"rtt_ms": rtt, "technique": technique, "run_id": doc["run_id"],
                       "mean_step_time_s": doc["mean_step_time_s"],
                       "median_step_time_s": sorted(doc["step_times_s"][3:])[len(doc["step_times_s"][3:]) // 2],
                       "wall_s": round(time.time() - t0, 1)}
                rows.append(row)
                print(f"rtt {rtt:>5} ms  {technique:<10} mean step {row['mean_step_time_s'] * 1e3:.1f} ms "
                      f"(median {row['median_step_time_s'] * 1e3:.1f} ms)", flush=True)
        finally:
            geosim("live", "wan", "down", env=env, check=False)
    result = {"rows": rows}
    lo, hi = min(args.wan_rtts), max(args.wan_rtts)
    times = {(r["rtt_ms"], r["technique"]): r.get("mean_step_time_s") for r in rows}
    for technique in args.wan_techniques:
        a, b = times.get((lo, technique)), times.get((hi, technique))
        if a and b:
            result[f"{technique}_ratio"] = b / a
            print(f"{technique}: {hi:g} ms / {lo:g} ms = {b / a:.3f}")
    if result.get("diloco_ratio") is not None:
        result["diloco_within_20_percent"] = result["diloco_ratio"] <= 1.2
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--technique", dest="techniques", default="data,diloco,sparseloco",
                        help="techniques, comma-separated (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--global-batch", dest="batch", type=int, default=8, help="sequences per step (default: %(default)s)")
    parser.add_argument("--lr", type=float, default=1e-3, help="inner (and Data's) AdamW learning rate")
    parser.add_argument("--seeds", default="0,1,2", help="seeds (initialization and data order), one run each")
    parser.add_argument("--cpu-devices", type=int, default=4, help="devices of the single-process runs (2 replicas x 2)")
    parser.add_argument("--inner-steps", type=int, default=10)
    parser.add_argument("--outer-lr", type=float, default=0.7)
    parser.add_argument("--outer-momentum", type=float, default=0.9)
    parser.add_argument("--topk", type=float, default=0.03)
    parser.add_argument("--bits", type=int, default=2)
    parser.add_argument("--sparse-outer-lr", type=float, default=1.0)
    parser.add_argument("--window", type=int, default=10, help="steps per curve point (default 10 = H)")
    parser.add_argument("--held-out", type=int, default=256,
                        help="also train in-process without this many sequences and evaluate the synchronized params "
                             "on them every H steps (0: skip)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out" / "lowcomm"))
    parser.add_argument("--plot", default=str(ROOT / "docs" / "img" / "loss-vs-tokens.png"))
    parser.add_argument("--wan", action="store_true", help="also the emulated-WAN timing (root)")
    parser.add_argument("--wan-only", action="store_true")
    parser.add_argument("--wan-rtts", default="0.1,40")
    parser.add_argument("--wan-steps", type=int, default=400, help="steps per WAN run (default 400: 4 rounds of H=100)")
    parser.add_argument("--wan-inner-steps", type=int, default=100,
                        help="H on the WAN (default 100; the sync's cost is spread over H steps)")
    parser.add_argument("--wan-techniques", default="diloco,data")
    args = parser.parse_args()
    args.techniques = [t.strip() for t in args.techniques.split(",") if t.strip()]
    args.seeds = [int(x) for x in args.seeds.split(",")]
    args.seed = args.seeds[0]
    args.wan_rtts = [float(x) for x in args.wan_rtts.split(",")]
    args.wan_techniques = [t.strip() for t in args.wan_techniques.split(",") if t.strip()]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "plot")}
    if not args.wan_only:
        (out / "curves.jsonl").unlink(missing_ok=True)
        (out / "runs.jsonl").unlink(missing_ok=True)
        summary["curves"] = {"settings": settings, "seeds": {}}
        summary["held_out"] = {"seeds": {}}
        for seed in args.seeds:
            args.seed = seed
            summary["curves"]["seeds"][seed] = train_curves(args, out)
            if args.held_out:
                summary["held_out"]["seeds"][seed] = eval_curves(args, out)
        for key in ("curves", "held_out"):
            per_seed = [r.get("token_efficiency") for r in summary[key]["seeds"].values() if r.get("token_efficiency")]
            summary[key]["token_efficiency_by_seed"] = {
                t: [round(e[t], 4) for e in per_seed] for t in (per_seed[0] if per_seed else {})}
            summary[key]["token_efficiency_mean"] = {
                t: round(sum(v) / len(v), 4) for t, v in summary[key]["token_efficiency_by_seed"].items()}
            print(f"{key}: token efficiency by seed {summary[key]['token_efficiency_by_seed']}")
        if len(args.techniques) > 1 and BASELINE in args.techniques:
            pooled, target = factors(out / "curves.jsonl")
            summary["curves"]["pooled"] = {"token_efficiency": pooled, "target_loss": target,
                                           "file": str(out / "curves.jsonl")}
            print(f"pooled over seeds (what `geosim predict --loss-curves {out / 'curves.jsonl'}` uses): "
                  + ", ".join(f"{t} {v:.3f}" for t, v in sorted(pooled.items())))
        title = (f"tiny GPT-2 (2 layers, 64 wide), generated corpus, batch {args.batch} x 64 tokens, "
                 f"AdamW lr {args.lr:g}, {args.cpu_devices} CPU devices (2 replicas)")
        plot(out, args.seeds, Path(args.plot), title, summary, bool(args.held_out))
    if args.wan or args.wan_only:
        summary["wan"] = wan_timing(args, out)
        summary["wan"]["settings"] = settings
    summary_path.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {summary_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
