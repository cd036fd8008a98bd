"""FSDP / ZeRO-3 on the JAX backend: every parameter and its Adam moments sharded over the mesh's
'data' axis (NamedSharding), the batch split over the same axis. The step is written on the global
arrays, as Shard's is; XLA's SPMD partitioner inserts what FSDP's runtime does by hand: each weight
all-gathered where a matmul needs it whole, each gradient reduce-scattered back onto its shard (on
the CPU backend, all-reduce + slice: runtime-facts). The update runs on the shards only.

Each array is split along its first axis that the device count divides (GPT-2's matrices along
their rows, the embeddings along the vocabulary or the positions); one no axis of divides (a bias of
odd width) stays whole on every device.
"""

from __future__ import annotations

import jax
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from geosim.live.train.techniques import Technique, init_sharded, make_mesh, replicated, value_and_grad_microbatched


def shard_spec(shape: tuple[int, ...], n: int, axis: str) -> P:
    """Split along the first dimension n divides; replicated where none does."""
    for i, size in enumerate(shape):
        if size % n == 0 and size >= n:
            return P(*([None] * i), axis)
    return P()


class FSDP(Technique):
    name = "fsdp"
    axis = "data"

    def build_mesh(self):
        return make_mesh((self.n,), (self.axis,), self.devices)

    def batch_sharding(self):
        return NamedSharding(self.mesh, P(self.axis))

    def init(self, params):
        self._param_shardings = jax.tree.map(lambda a: NamedSharding(self.mesh, shard_spec(a.shape, self.n, self.axis)),
                                             params)
        params, opt_state, self._opt_shardings = init_sharded(self.tx, params, self._param_shardings, self.mesh)
        return params, opt_state

    def step_fn(self):
        def step(params, opt_state, batch):
            loss, grads = value_and_grad_microbatched(self.cfg, params, batch, self.setup.microbatches)
            grads = jax.lax.with_sharding_constraint(grads, self._param_shardings)  # reduce-scattered onto the shards
            updates, opt_state = self.tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        return jax.jit(step, donate_argnums=(0, 1),
                       out_shardings=(self._param_shardings, self._opt_shardings, replicated(self.mesh)))

    def full_params(self, state):
        return state[0]

    def sharded_fraction(self, params) -> float:
        """Of the parameters, the fraction split over the devices (the rest is whole on each)."""
        total = sum(a.size for a in jax.tree.leaves(params))
        split = sum(a.size for a in jax.tree.leaves(params) if shard_spec(a.shape, self.n, self.axis) != P())
        return split / total


TECHNIQUE = FSDP


def placement(model, global_batch: int, microbatches: int, devices: int, stages: int | None = None):
    """This step's placement for the memory model: the simulator's technique says it (one place for both)."""
    from geosim.techniques.fsdp import jax_placement

    return jax_placement(model, global_batch, microbatches, devices, stages)
