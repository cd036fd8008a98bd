"""Intra-operator (tensor) sharding (alpa.ShardParallel): every weight matrix is split
over all devices, Megatron-style: the first matmul of attention and of the MLP by
columns, the second by rows, the embeddings along the model width. Each device holds
1/n of the parameters and of the optimizer state; XLA's SPMD partitioner inserts the
collectives (all-reduces of activations, forward and backward) that this layout needs.
"""

from __future__ import annotations

import jax
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from geosim.live.train.techniques import Technique, init_sharded, make_mesh, replicated, value_and_grad_microbatched


def weight_spec(path: tuple[str, ...], ndim: int, axis: str, lead: tuple = ()) -> P:
    """The PartitionSpec of one GPT-2 parameter, from its path in the parameter tree.
    `lead` prefixes specs for stacked layers (the pipeline's leading layer axis)."""
    names = "/".join(path)
    if names.endswith(("c_attn/kernel", "c_fc/kernel")):
        spec = (None, axis)  # column-parallel
    elif names.endswith(("c_attn/bias", "c_fc/bias")):
        spec = (axis,)
    elif names.endswith("c_proj/kernel"):
        spec = (axis, None)  # row-parallel: partial sums all-reduced
    elif names.endswith("embedding"):
        spec = (None, axis)
    else:
        spec = (None,) * (ndim - len(lead))  # biases after row-parallel matmuls, layer norms
    return P(*lead, *spec)


def tree_specs(params, axis: str, lead: tuple = ()):
    return jax.tree_util.tree_map_with_path(
        lambda path, a: weight_spec(tuple(k.key for k in path), a.ndim, axis, lead), params)


class Shard(Technique):
    name = "shard"
    axis = "model"

    def check(self):
        cfg = self.cfg
        self.divides(cfg.n_embd, self.n, "n_embd", "devices", "--model")
        self.divides(self.setup.global_batch, self.setup.microbatches, "global batch", "microbatches", "--microbatches")

    def build_mesh(self):
        return make_mesh((self.n,), (self.axis,), self.devices)

    def batch_sharding(self):
        return replicated(self.mesh)  # every device sees the whole batch, holds 1/n of each weight

    def init(self, params):
        self._param_shardings = jax.tree.map(lambda s: NamedSharding(self.mesh, s), tree_specs(params, self.axis))
        params, opt_state, self._opt_shardings = init_sharded(self.tx, params, self._param_shardings, self.mesh)
        return params, opt_state

    def step_fn(self):
        def step(params, opt_state, batch):
            loss, grads = value_and_grad_microbatched(self.cfg, params, batch, self.setup.microbatches)
            updates, opt_state = self.tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        return jax.jit(step, donate_argnums=(0, 1),
                       out_shardings=(self._param_shardings, self._opt_shardings, replicated(self.mesh)))

    def full_params(self, state):
        return state[0]


TECHNIQUE = Shard
