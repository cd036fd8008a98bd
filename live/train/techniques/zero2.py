"""ZeRO stage 2 (alpa.Zero2Parallel): data parallel, but each device keeps only its
1/n slice of the gradients and of the optimizer state.

Per step: for each microbatch, local gradients over this device's share, flattened into
one buffer and reduce-scattered into a sharded accumulator (as Alpa does: its gradient
accumulator is sharded too, so the reduce-scatter runs every microbatch; Data's
all-reduce runs once per step); AdamW updates only this device's slice of the
(flattened) parameters; an all-gather gives every device the full new parameters again.
Adam is elementwise, so updating slices gives exactly the update the replicated
optimizer computes.
(XLA's CPU backend lowers the reduce-scatter to all-reduce + slice; NCCL runs a real one.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from geosim.live.train.techniques import Technique, replicated, value_and_grad_microbatched


class Zero2(Technique):
    name = "zero2"
    axis = "data"

    def _layout(self, params):
        flat, unravel = ravel_pytree(params)
        chunk = -(-flat.size // self.n)  # padded so every device gets an equal slice
        return flat.size, chunk, unravel

    def _opt_specs(self, opt_state, padded):
        # the flat moment vectors are sliced over devices; scalars (the step count) are replicated
        return jax.tree.map(lambda a: P(self.axis) if a.ndim == 1 and a.shape[0] == padded else P(), opt_state)

    def init(self, params):
        size, chunk, _ = self._layout(params)
        self._size, self._chunk = size, chunk
        params = jax.device_put(params, replicated(self.mesh))
        shape = jax.eval_shape(self.tx.init, jax.ShapeDtypeStruct((chunk * self.n,), jnp.float32))
        self._opt_in_specs = self._opt_specs(shape, chunk * self.n)
        shardings = jax.tree.map(lambda spec: NamedSharding(self.mesh, spec), self._opt_in_specs)
        opt_state = jax.jit(lambda: self.tx.init(jnp.zeros((chunk * self.n,), jnp.float32)), out_shardings=shardings)()
        return params, opt_state

    def step_fn(self):
        size, chunk, n, axis = self._size, self._chunk, self.n, self.axis

        def local_step(params, opt_slice, batch):
            flat_params, unravel = ravel_pytree(params)
            pad = chunk * n - size

            def scatter(loss, grads):
                flat_grads, _ = ravel_pytree(grads)
                return loss, jax.lax.psum_scatter(jnp.pad(flat_grads, (0, pad)), axis, tiled=True)

            loss, grad_slice = value_and_grad_microbatched(self.cfg, params, batch, self.setup.microbatches,
                                                           local_axis=axis, each=scatter)
            grad_slice = grad_slice / n
            start = jax.lax.axis_index(axis) * chunk
            param_slice = jax.lax.dynamic_slice(jnp.pad(flat_params, (0, pad)), (start,), (chunk,))
            updates, opt_slice = self.tx.update(grad_slice, opt_slice, param_slice)
            new_flat = jax.lax.all_gather(param_slice + updates, axis, tiled=True)[:size]
            return unravel(new_flat), opt_slice, jax.lax.pmean(loss, axis)

        step = jax.shard_map(local_step, mesh=self.mesh, in_specs=(P(), self._opt_in_specs, P(axis)),
                             out_specs=(P(), self._opt_in_specs, P()),
                             # all_gather's result is the same on every device, but JAX's
                             # replication check cannot infer that: checked by the tests instead
                             check_vma=False)
        return jax.jit(step, donate_argnums=(0, 1))

    def full_params(self, state):
        return state[0]


TECHNIQUE = Zero2
