"""The collectives XLA compiles into live's train step: how many, of which kind and size.

A fact of the compiled program, not a fit: live's step for a technique is lowered and compiled on
N CPU devices exactly as live/train/compiled_memory.py compiles it (abstract state, nothing
allocated), and every collective of the optimized HLO (`compiled.as_text()`) is listed. Gloo,
the CPU backend's collectives library, makes one call (one round trip or ring) per tensor, even
where XLA merged several tensors into one tuple-shaped all-reduce, so a collective here is one
tensor: a tuple counts once per element.

What the simulator's `jax` runtime issues for Shard (geosim/data/runtimes.toml, the
shard_layer_collectives and shard_step_collectives tables) is read from two compiles of the same
model, with 1 and 2 layers: the difference is one layer's collectives, the rest the step's own
(the embedding, the LM head's logits, the optimizer's gathers). Sizes are in activations (one
microbatch's tokens x n_embd values), as the simulator prices Shard's all-reduces. Each HLO op is
put in the simulator's vocabulary by the bytes a rank moves: an all-to-all of T bytes moves what an
all-gather of T does, a collective-permute of T (every rank sends T to its neighbour) what an
all-gather of T x p / (p - 1) does.

Each compile runs in a worker process of its own (`run_cases`, through compiled_memory's: the device
count is fixed when JAX starts); layer_tables() and pipeline_tables() drive it, and
`python -m geosim.live.train.compiled_collectives --layer-tables TECHNIQUE [MODEL]` (or
`--pipeline-tables`) prints the tables.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter

# one collective of the optimized HLO: "%name = SHAPE op(" or "... op-start(" (async form)
_OP = re.compile(r"=\s+(.*?)\s+(all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute)(?:-start)?\(")
_ARRAY = re.compile(r"([a-z]+\d*)\[([\d,]*)\]")
BYTES = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "s8": 1, "u8": 1, "pred": 1, "s64": 8, "u64": 8}
SIMULATOR_OP = {"all-reduce": "allreduce", "all-gather": "all_gather", "reduce-scatter": "reduce_scatter",
                "all-to-all": "all_gather", "collective-permute": "all_gather"}


def collectives(hlo_text: str, devices: int) -> list[tuple[str, str, int]]:
    """Every tensor collective of an optimized HLO module: (HLO op, simulator op, bytes in the simulator's
    sense: an allreduce's buffer, an all_gather's result). The *-done halves of async pairs are not
    collectives of their own; their -start is counted."""
    out = []
    for line in hlo_text.splitlines():
        m = _OP.search(line)
        if not m:
            continue
        op = m.group(2)
        shapes = _ARRAY.findall(m.group(1))
        if op in ("all-reduce", "all-gather", "reduce-scatter") and m.group(1).startswith("(") and "-start" in line:
            shapes = shapes[len(shapes) // 2:] if op != "all-reduce" else shapes  # (operands, results) of a start
        for dtype, dims in shapes:
            elements = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
            nbytes = elements * BYTES.get(dtype, 4)
            if op == "collective-permute" and devices > 1:
                nbytes = nbytes * devices / (devices - 1)
            elif op == "reduce-scatter":  # the HLO's shape is each rank's slice; the simulator's, the whole buffer
                nbytes *= devices
            out.append((op, SIMULATOR_OP[op], int(nbytes)))
    return out


# a computation's first line ("%name (params) -> shape {" or "ENTRY %name ..."), a while loop's body and trip count
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_WHILE_BODY = re.compile(r"\bwhile\(.*?\bbody=%([\w.\-]+)")
_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
_CALLED = re.compile(r"\b(?:calls|to_apply)=%([\w.\-]+)")


def executed_collectives(hlo_text: str, devices: int) -> list[tuple[str, str, int, int]]:
    """collectives() with how many times each runs in one execution of the program: a collective inside a
    while loop's body (a scan: live's pipeline ticks) runs once per trip (XLA's known_trip_count; nested
    loops multiply). (HLO op, simulator op, bytes, times)."""
    bodies: dict[str, list[str]] = {}
    entry, current = None, None
    for line in hlo_text.splitlines():
        m = _COMPUTATION.match(line) if line and not line.startswith(" ") else None
        if m:
            current = m.group(1)
            bodies[current] = []
            entry = current if line.startswith("ENTRY") else entry
        elif current is not None:
            bodies[current].append(line)
    if entry is None:
        raise ValueError("no ENTRY computation in the HLO text")
    times: Counter = Counter()

    def visit(name: str, n: int) -> None:
        times[name] += n
        for line in bodies.get(name, ()):
            loop = _WHILE_BODY.search(line)
            if loop:
                trips = _TRIPS.search(line)
                if trips is None:
                    raise ValueError(f"a while loop without a known trip count: {line.strip()[:120]}")
                visit(loop.group(1), n * int(trips.group(1)))
            for called in _CALLED.findall(line):
                if called in bodies and called != name:
                    visit(called, n)

    visit(entry, 1)
    out = []
    for name, lines in bodies.items():
        for op, sim, nbytes in collectives("\n".join(lines), devices):
            out.append((op, sim, nbytes, times[name]))
    return out


def compile_collectives(case: dict, devices: list) -> list[tuple[str, str, int]]:
    from geosim.live.train.compiled_memory import compiled_step

    return collectives(compiled_step(case, devices).as_text(), len(devices))


def run_cases(devices: int, cases: list[dict], timeout_s: float = 900.0) -> list[dict]:
    """Compile `cases` on `devices` CPU devices in a fresh process (compiled_memory's worker: the count is
    fixed when JAX starts); per case {"collectives": [[hlo op, simulator op, bytes], ...]} or {"error": ...}."""
    from geosim.live.train.compiled_memory import run_cases as run_compiles

    rows = run_compiles("cpu", devices, cases, timeout_s, worker="geosim.live.train.compiled_collectives")
    if len(rows) != len(cases):
        raise RuntimeError(f"the compile process answered {len(rows)} of {len(cases)} cases")
    return rows


def activations_of(case: dict, model) -> float:
    """Bytes of one activation of the case's microbatch (tokens x n_embd, fp32 on the CPU)."""
    seq = case.get("seq_len") or model.n_ctx
    return case["global_batch"] / case["microbatches"] * seq * model.n_embd * 4


def table(rows: list[tuple[str, int]], activation_bytes: float) -> list[dict]:
    """[(simulator op, bytes)] -> the runtimes.toml form: one entry per (op, size), sizes in activations."""
    counts = Counter(rows)
    return [{"op": op, "count": n, "activations": round(nbytes / activation_bytes, 6)}
            for (op, nbytes), n in sorted(counts.items())]


def layer_tables(technique: str, model_name: str = "small-wan", vocab: int = 257, devices: int = 2,
                 global_batch: int = 8) -> dict:
    """The per-layer and per-step collectives of live's `technique` step for a model, from compiles with
    1 and 2 layers (vocab 257: the byte tokenizer live's WAN runs use). Also the 2-layer total."""
    from geosim.inputs.scenario import get_model
    from geosim.inputs.specs import Model

    base = get_model(model_name)
    cases = []
    for layers in (1, 2):
        dims = {"n_layer": layers, "n_embd": base.n_embd, "n_head": base.n_head, "vocab": vocab, "n_ctx": base.n_ctx}
        cases.append({"technique": technique, "model": model_name, "dims": dims, "precision": "fp32",
                      "global_batch": global_batch, "microbatches": 1})
    one, two = (Counter((op, b) for _, op, b in row["collectives"]) for row in run_cases(devices, cases))
    layer = two - one
    if one - two or any(one[k] < layer[k] for k in layer):
        raise RuntimeError(f"the 2-layer step does not hold the 1-layer step's collectives: {one} vs {two}")
    step = one - layer
    act = activations_of(cases[0], Model(name=model_name, **cases[0]["dims"]))
    return {"layer": table(list(layer.elements()), act), "step": table(list(step.elements()), act),
            "total_two_layers": sum(two.values())}


def pipeline_tables(technique: str, model_name: str = "small-wan", vocab: int = 257,
                    global_batch: int = 8, microbatches: int = 1, stages: int = 2) -> dict:
    """What live's pipeline step (GPipe over M + S - 1 ticks, one device per stage) runs besides the M sends
    per direction a pipeline schedule has: {"tick": collectives run once a tick (the embedding's cotangent
    summed over the stages), "step": once a step (the shared parameters' gradients, the loss), in
    runtimes.toml's form, and "extra_sends": stage exchanges (collective-permutes) beyond the M per
    direction: those of the S - 1 bubble ticks}."""
    from geosim.inputs.scenario import get_model
    from geosim.inputs.specs import Model

    base = get_model(model_name)
    dims = {"n_layer": base.n_layer, "n_embd": base.n_embd, "n_head": base.n_head, "vocab": vocab, "n_ctx": base.n_ctx}
    case = {"technique": technique, "model": model_name, "dims": dims, "precision": "fp32",
            "global_batch": global_batch, "microbatches": microbatches, "stages": stages, "executed": True}
    row = run_cases(stages, [case])[0]
    if "error" in row:
        raise RuntimeError(row["error"])
    ticks = microbatches + stages - 1
    tick, step, extra_sends = [], [], 0
    for op, sim, nbytes, times in row["collectives"]:
        if op == "collective-permute" and times == ticks:  # a stage exchange each tick: M are the schedule's sends
            extra_sends += ticks - microbatches
        elif times == ticks:
            tick.append((sim, nbytes))
        elif times == 1:
            step.append((sim, nbytes))
        else:
            raise RuntimeError(f"a {op} of {nbytes} B runs {times} times a step: neither once nor once a tick ({ticks})")
    act = activations_of(case, Model(name=model_name, **dims))
    return {"tick": table(tick, act), "step": table(step, act), "extra_sends": extra_sends}


def case_collectives(case: dict, devices: list) -> dict:
    """One case's collectives (compiled_memory's worker calls this): every tensor collective of the
    compiled step, or with case["executed"] each counted as often as its loops run it."""
    from geosim.live.train.compiled_memory import compiled_step

    compiled = compiled_step(case, devices).as_text()
    count = len(devices)
    return {"collectives": executed_collectives(compiled, count) if case.get("executed")
            else collectives(compiled, count)}


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--layer-tables":  # --layer-tables TECHNIQUE [MODEL]
        print(json.dumps(layer_tables(*sys.argv[2:4]), indent=1))
        sys.exit(0)
    if len(sys.argv) > 2 and sys.argv[1] == "--pipeline-tables":  # --pipeline-tables TECHNIQUE [MODEL]
        print(json.dumps(pipeline_tables(*sys.argv[2:4]), indent=1))
        sys.exit(0)
    if len(sys.argv) != 3:
        print("usage: python -m geosim.live.train.compiled_collectives --layer-tables | --pipeline-tables "
              "TECHNIQUE [MODEL]   (or BACKEND DEVICES: run_cases' worker, cases on stdin)", file=sys.stderr)
        sys.exit(2)
    from geosim.live.train.compiled_memory import serve

    sys.exit(serve(sys.argv[1], int(sys.argv[2]), case_collectives))  # run_cases' worker: BACKEND DEVICES
