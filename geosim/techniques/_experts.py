"""Expert parallelism for a mixture of experts (GShard, Switch, DeepSpeed-MoE): Data's replicas, with each MoE
layer's experts split over groups of E consecutive GPUs of a host or a site.

Each GPU holds every weight outside the experts and 1/E of the experts; the batch is split over every GPU as
Data splits it. Each MoE layer sends every token's hidden state to the GPUs of its top-k experts and back:
two all-to-alls in the group per MoE layer in the forward (dispatch, combine) and two in the backward, on
the critical path (no overlap with compute: Megatron-LM's default). The gradient of the weights outside the
experts is all-reduced over every GPU, an expert's over the GPUs holding the same experts (one per group).
A group whose GPUs sit at two sites would run its all-to-alls over a WAN link: refused, never silently.
"""

from __future__ import annotations

from geosim.base.errors import GeosimError
from geosim.sim.schedule import Collective, Repeat

FLAG = "--expert-parallel"


def check_degree(case, devices, degree: int) -> list[tuple[int, ...]]:
    """The expert-parallel groups of `degree` consecutive GPUs, each inside one site (else one line why)."""
    model = case.model
    if not model.moe:
        raise GeosimError(f"{model.name} is a dense model: no experts to split (expert parallelism needs a mixture "
                          "of experts)", source=FLAG)
    if degree < 1 or model.n_expert % degree:
        raise GeosimError(f"must divide {model.name}'s {model.n_expert} experts, got {degree}", source=FLAG)
    if len(devices) % degree:
        raise GeosimError(f"must divide the {len(devices)} GPUs, got {degree}", source=FLAG)
    site = {h.name: h.site for h in case.cluster.hosts}
    groups = [tuple(d.rank for d in devices[i:i + degree]) for i in range(0, len(devices), degree)]
    for i in range(0, len(devices), degree):
        sites = sorted({site[d.host] for d in devices[i:i + degree]})
        if len(sites) > 1:
            raise GeosimError(f"a group of {degree} GPUs would span sites {' and '.join(sites)}: its all-to-alls "
                              "(two per MoE layer, forward and backward) would cross a WAN link; give a degree "
                              "that fits in a site's GPUs", source=FLAG)
    return groups


def params_held(model, degree: int) -> float:
    """Parameters one GPU holds: everything outside the experts, 1/degree of the experts."""
    return model.num_params - model.expert_params + model.expert_params / degree


def exchange(model, workload, sequences: float, group: tuple[int, ...], direction: str) -> Repeat:
    """One microbatch's all-to-alls in one direction: dispatch and combine in each MoE layer. Each GPU's
    buffer: its tokens' hidden states, once for each expert a token goes to (top-k x the capacity factor)."""
    nbytes = sequences * workload.seq_len * model.n_embd * workload.bytes_per_value * model.routed_tokens
    tag = ("a2a", direction)
    ops = (Collective("all_to_all", group, nbytes, "pairwise", tag + ("dispatch",), f"MoE dispatch ({direction})"),
           Collective("all_to_all", group, nbytes, "pairwise", tag + ("combine",), f"MoE combine ({direction})"))
    return Repeat(ops, model.moe_layers, group, tag + ("layers",), f"MoE all-to-alls ({direction}, per layer)")


def peer_groups(groups: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The GPUs holding the same experts: the i-th of every group."""
    return [tuple(g[i] for g in groups) for i in range(len(groups[0]))]
