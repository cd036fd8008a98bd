"""Time to a target: low-communication techniques are faster per token but need more tokens.

    time_to_target_s = target_tokens / token_efficiency / tokens_per_s + startup_s

token_efficiency = tokens Data needs / tokens this technique needs to reach the same
loss (1.0 for the study's four, which compute the same synchronous update; below 1 for
DiLoCo, SparseLoCo and the hybrid). Where a value comes from, first match wins:
  1. the user's override (`--token-efficiency diloco=0.85`),
  2. measured: loss-vs-tokens curves of live runs (`--loss-curves FILE`): the tokens
     Data's curve needs to reach a loss, over the tokens the technique's curve needs,
  3. the parameters file's [convergence.token_efficiency] (shipped defaults: assumed loss
     gaps from the papers turned into tokens by efficiency_from_loss_gap below).

There is no tokens-to-loss rule for an absolute loss here: the target is a token count
(what Data would need), e.g. Chinchilla's 20 tokens per parameter.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from pathlib import Path

from geosim.base.errors import GeosimError
from geosim.inputs.records import json_lines
from geosim.inputs.specs import Model, Params
from geosim.techniques import get_technique, technique_names
from geosim.base.validate import check_number

CHINCHILLA_TOKENS_PER_PARAM = 20
# bounds on the user's numbers (docs/reference/cli.md): 1e16 tokens is ~1,000x today's largest runs;
# an efficiency is Data's tokens over the technique's, and none is 10x better than Data
TARGET_TOKENS_RANGE = (0.0, 1e16)
MAX_TOKEN_EFFICIENCY = 10.0
# Hoffmann et al. 2022 (Chinchilla), approach 3: L(N, D) = E + A / N^alpha + B / D^beta
CHINCHILLA = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}


@dataclass(frozen=True)
class TokenEfficiency:
    value: float
    source: str


def efficiency_from_loss_gap(gap: float, num_params: float, tokens: float) -> float:
    """A technique `gap` (fraction) above Data's loss after `tokens` tokens: how many of
    those tokens Data needs to reach the technique's loss, by Chinchilla's fit."""
    c = CHINCHILLA
    loss = c["E"] + c["A"] / num_params ** c["alpha"] + c["B"] / tokens ** c["beta"]
    data_term = loss * (1 + gap) - c["E"] - c["A"] / num_params ** c["alpha"]
    if data_term <= 0:
        raise GeosimError(f"a loss gap of {gap:g} is below what more data can buy", key="gap")
    return (c["B"] / data_term) ** (1 / c["beta"]) / tokens


def target_tokens(value: str, model: Model) -> int:
    """--target-tokens: a count (7.1e9, 7100000000) or 'chinchilla' (20 tokens per parameter)."""
    if value.strip().lower() == "chinchilla":
        return CHINCHILLA_TOKENS_PER_PARAM * model.num_params
    try:
        tokens = float(value)
    except ValueError:
        raise GeosimError(f"must be a token count or 'chinchilla', got {value!r}", source="--target-tokens") from None
    return int(check_number(tokens, "--target-tokens", None, *TARGET_TOKENS_RANGE, exclusive_low=True))


def parse_overrides(items: list[str] | None) -> dict[str, float]:
    """--token-efficiency TECHNIQUE=VALUE, repeatable."""
    out = {}
    for item in items or []:
        name, _, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = -1.0
        if not name.strip() or not 0 < number <= MAX_TOKEN_EFFICIENCY:  # NaN fails the comparison too
            raise GeosimError(f"expected TECHNIQUE=VALUE with 0 < VALUE <= {MAX_TOKEN_EFFICIENCY:g}, got {item!r}",
                              source="--token-efficiency")
        if name.strip() not in technique_names():
            raise GeosimError(f"unknown technique {name.strip()!r} (known: {', '.join(technique_names())})",
                              source="--token-efficiency")
        out[name.strip()] = number
    return out


# --- measured: loss-vs-tokens curves ---------------------------------------------------

def read_loss_curves(path: str | Path) -> dict[str, list[tuple[float, float]]]:
    """JSON lines, each an object with "technique" and "loss_curve": [[tokens, loss], ...]
    (a run record with that extra key, or any object); lines without a curve are skipped.
    Several curves of one technique are pooled (sorted by tokens)."""
    curves: dict[str, list[tuple[float, float]]] = {}
    for where, doc in json_lines(path):
        curve = doc.get("loss_curve") if isinstance(doc, dict) else None
        if curve is None:
            continue
        if not isinstance(doc.get("technique"), str):
            raise GeosimError("a loss curve needs a technique", source=where, key="technique")
        try:
            points = [(float(t), float(loss)) for t, loss in curve]
        except (TypeError, ValueError, OverflowError):
            raise GeosimError("must be a list of [tokens, loss] pairs", source=where, key="loss_curve") from None
        if not points or any(not (math.isfinite(t) and math.isfinite(v)) or t < 0 or v <= 0 for t, v in points):
            raise GeosimError("must be a non-empty list of [tokens >= 0, loss > 0] pairs of finite numbers",
                              source=where, key="loss_curve")
        curves.setdefault(doc["technique"], []).extend(points)
    if not curves:
        raise GeosimError("no loss curves (objects with 'technique' and 'loss_curve')", source=str(path))
    return {t: sorted(points) for t, points in curves.items()}


def tokens_to_loss(curve: list[tuple[float, float]], loss: float) -> float | None:
    """Tokens at which the curve first reaches `loss`, interpolated linearly; None if never."""
    previous = None
    for tokens, value in curve:
        if value <= loss:
            if previous is None or previous[1] == value:
                return tokens
            t0, l0 = previous
            return t0 + (l0 - loss) * (tokens - t0) / (l0 - value)
        previous = (tokens, value)
    return None


def measured_efficiencies(curves: dict[str, list[tuple[float, float]]], target_loss: float | None = None,
                          baseline: str = "data") -> dict[str, float]:
    """tokens(baseline) / tokens(technique) to reach target_loss (default: the lowest loss
    that every curve reaches, so every ratio is measured rather than extrapolated)."""
    if baseline not in curves:
        raise GeosimError(f"no loss curve for the baseline technique {baseline!r}", key="loss_curve")
    if target_loss is None:
        target_loss = max(min(loss for _, loss in c) for c in curves.values())
    base = tokens_to_loss(curves[baseline], target_loss)
    if base is None:
        raise GeosimError(f"the {baseline} curve never reaches loss {target_loss:g}", key="loss_curve")
    out = {}
    for technique, curve in curves.items():
        tokens = tokens_to_loss(curve, target_loss)
        if tokens is not None and tokens > 0:
            out[technique] = base / tokens
    return out


# --- which efficiency a prediction gets --------------------------------------------------

def token_efficiency(technique: str, params: Params, *, compressed_pipeline: bool = False,
                     overrides: dict[str, float] | None = None, measured: dict[str, float] | None = None) -> TokenEfficiency:
    """compressed_pipeline: the run sends compressed activations between pipeline stages
    (Pipeshard with activation_compression < 1, the hybrid when it pipelines)."""
    if overrides and technique in overrides:
        return TokenEfficiency(overrides[technique], "given (--token-efficiency)")
    if measured and technique in measured:
        return TokenEfficiency(measured[technique], "measured (loss curves)")
    table = params.token_efficiency
    module = get_technique(technique) if technique in technique_names() else None
    same_as = getattr(module, "WITHOUT_PIPELINE_IS", None)
    if same_as and not compressed_pipeline and same_as in table:
        # every host holds a full replica: the run is that technique's (the hybrid is SparseLoCo)
        return TokenEfficiency(table[same_as], f"{params.source} [convergence.token_efficiency] {same_as} "
                                          "(no pipelined replica)")
    if technique not in table:
        return TokenEfficiency(1.0, "assumed 1.0 (no [convergence.token_efficiency] entry)")
    value, source = table[technique], f"{params.source} [convergence.token_efficiency]"
    if compressed_pipeline and not getattr(module, "EFFICIENCY_COUNTS_COMPRESSION", False):
        value *= params.compressed_activation_efficiency
        source += " x compressed_activation_efficiency"
    return TokenEfficiency(value, source)


def time_to_target_s(tokens: float, efficiency: float, tokens_per_s: float, startup_s: float = 0.0) -> float:
    return tokens / efficiency / tokens_per_s + startup_s


def uses_compressed_pipeline(prediction, params: Params) -> bool:
    """Whether a prediction's run sends compressed activations between pipeline stages
    (the schedule says so: Prediction.activation_compression)."""
    return prediction.activation_compression < 1


def annotate(predictions: list, params: Params, tokens_for, overrides=None, measured=None) -> list[dict]:
    """For each prediction, the time-to-target fields (None where it did not run):
    target_tokens, token_efficiency, token_efficiency_source, time_to_target_s.
    tokens_for(prediction) gives the target token count (it may depend on the model)."""
    rows = []
    for p in predictions:
        eff = token_efficiency(p.technique, params, compressed_pipeline=uses_compressed_pipeline(p, params),
                               overrides=overrides, measured=measured)
        tokens = tokens_for(p)
        rows.append({
            "target_tokens": tokens, "token_efficiency": eff.value, "token_efficiency_source": eff.source,
            "time_to_target_s": time_to_target_s(tokens, eff.value, p.tokens_per_s, p.startup_s or 0.0) if p.ok else None,
        })
    return rows
