"""ZeRO stage 2 (alpa.Zero2Parallel): data parallel, but gradients are reduce-scattered
and the optimizer state is sharded; updated parameters are all-gathered (in the
precision params.zero2_gather_bytes_per_param says: 4 when the fp32 master shards are
gathered and cast afterwards). Collectives go bucket by bucket, so each bucket pays
the link's latency."""

from __future__ import annotations

import math

from geosim.memory import activation_bytes, gpu_memory
from geosim.schedule import Collective, Compute, Repeat, Schedule
from geosim.specs import Cluster, Model, Params, Workload
from geosim.techniques._base import accumulation, check_dims, devices_of, microbatch_per_gpu, overhead_op

NAME = "zero2"
DESCRIPTION = "data parallel with bucketed reduce-scatter of gradients, sharded optimizer, all-gather of parameters"


def build(cluster: Cluster, model: Model, workload: Workload, params: Params) -> Schedule:
    check_dims(model, workload)
    devices = devices_of(cluster)
    p = len(devices)
    per_gpu = microbatch_per_gpu(workload, p)
    grad_bytes = model.num_params * workload.bytes_per_value
    buckets = max(1, math.ceil(grad_bytes / params.zero2_bucket_bytes))
    bucket = grad_bytes / buckets
    group = tuple(d.rank for d in devices)
    algorithm = params.collectives.get(NAME, "ring")
    program = [accumulation(model, workload, per_gpu, group)]
    program.append(Repeat((Collective("reduce_scatter", group, bucket, algorithm, ("rs",), "gradient reduce-scatter"),),
                          buckets, group, ("rs buckets",), "reduce-scatter buckets"))
    # the optimizer updates only this GPU's shard: 1/p of Adam's ~10 FLOPs per parameter
    program.append(Compute(10.0 * model.num_params / p, "optimizer"))
    gathered = bucket * params.zero2_gather_bytes_per_param / workload.bytes_per_value
    program.append(Repeat((Collective("all_gather", group, gathered, algorithm, ("ag",), "parameter all-gather"),),
                          buckets, group, ("ag buckets",), "all-gather buckets"))
    program.append(overhead_op(NAME, params))
    memory = {}
    for d in devices:
        memory[d.rank] = gpu_memory(
            params_held=model.num_params, grads_held=model.num_params / p, optimizer_held=model.num_params / p,
            activations=activation_bytes(model, workload, per_gpu, model.n_layer, with_head=True),
            workload=workload, params=params,
        )
    return Schedule(NAME, devices, {d.rank: program for d in devices},
                    {r: sum(m.values()) for r, m in memory.items()}, memory,
                    f"ZeRO-2 over {p} GPUs, {buckets} buckets of {bucket / 2**20:.1f} MiB")
