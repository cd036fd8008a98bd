"""DiLoCo (Douillard et al. 2023, arXiv:2311.08105): R replicas train on their own data for
H inner steps, then synchronize once.

Layout: a (replica, data) mesh, one mesh row per replica. With the devices ordered by
host (`ordered_devices`), a replica is one host when R = the number of hosts (the
default on a multi-host run; on one host: 2 replicas, half the devices each). Within a
replica the devices train data parallel (one flat all-reduce over `data`), with the inner
optimizer (the run's AdamW); parameters and inner optimizer state carry a leading replica
dimension, sharded over `replica`, so each replica holds its own copy.

One `step` is one inner step of every replica on its share of the global batch (the
rows Data's step gets, split replica by replica), so tokens per step equal Data's. Inner
steps do not communicate between replicas, not even for the loss: each replica's loss
comes back sharded over `replica` and, in a single process, this host averages them (the
global batch's mean, as Data reports it). Over several processes (hosts) a process cannot
read the other replicas' losses without a network round trip per step, so each reports
its own replica's loss (on its share of the batch). Every H-th step also runs the outer
step, in the same compiled program:

    pseudo-gradient  = outer params - replica params           (per replica)
    averaged         = mean over replicas                       (the only cross-replica collective)
    outer params     = outer optimizer (Nesterov SGD by default) step with `averaged`
    replica params   = outer params                             (inner optimizer state kept)

The cross-replica average is done slice by slice: device d of each replica reduces the
d-th slice of the flat pseudo-gradient with its peers (one pmean over `replica`), then
the replica's devices all-gather the slices (over `data`, inside the host). Every byte
crosses between replicas once, as one buffer: one gloo round trip per sync.

Options: keyword arguments (live/train/lowcomm.py: `geosim live run --replicas --inner-steps
--outer-lr --outer-momentum`), else the defaults there: DiLoCo's paper uses outer lr 0.7 and
Nesterov momentum 0.9.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from geosim.base.errors import GeosimError
from geosim.live.train.techniques import Technique, make_mesh, replicated, value_and_grad_microbatched
from geosim.live.train import lowcomm


def effective_options(technique: str, **options) -> dict:
    """Defaults < the technique's own defaults < keyword arguments (None: not given)."""
    return lowcomm.effective(technique, options)


def outer_optimizer(lr: float, momentum: float) -> optax.GradientTransformation:
    """SGD on the pseudo-gradient; Nesterov momentum when momentum > 0 (DiLoCo's outer step).
    lr 1 and no momentum: the outer params become the replicas' average."""
    if momentum:
        return optax.sgd(lr, momentum=momentum, nesterov=True)
    return optax.sgd(lr)


class DiLoCo(Technique):
    name = "diloco"
    replica_axis = "replica"
    axis = "data"

    def __init__(self, setup, **options):
        opts = effective_options(self.name, **options)
        self.options = opts
        self.inner_steps = int(opts["inner_steps"])
        if self.inner_steps <= 0:
            raise GeosimError(f"must be > 0, got {self.inner_steps}", key="--inner-steps")
        if opts["outer_lr"] <= 0 or not 0 <= opts["outer_momentum"] < 1:
            raise GeosimError("--outer-lr must be > 0 and --outer-momentum in [0, 1)", key="--outer-lr")
        self.outer_tx = outer_optimizer(float(opts["outer_lr"]), float(opts["outer_momentum"]))
        self.steps_done = 0  # inner steps run so far: every inner_steps-th one synchronizes
        self._sync_jitted = self._sync_compiled = None
        super().__init__(setup)

    # ------------------------------------------------------------------ layout
    def check(self):
        replicas = self.options["replicas"]
        if replicas is None:
            hosts = len({d.process_index for d in self.devices})
            replicas = hosts if hosts > 1 else min(2, self.n)
        self.replicas = int(replicas)
        if self.replicas <= 0 or self.n % self.replicas:
            raise GeosimError(f"replicas ({self.replicas}) must divide the devices ({self.n})", key="--replicas")
        self.per_replica = self.n // self.replicas
        super().check()

    def build_mesh(self):
        return make_mesh((self.replicas, self.per_replica), (self.replica_axis, self.axis), self.devices)

    def batch_sharding(self):
        return NamedSharding(self.mesh, P((self.replica_axis, self.axis)))

    def _stacked(self):
        return NamedSharding(self.mesh, P(self.replica_axis))

    def slice_size(self, size: int) -> int:
        """Each device of a replica reduces one slice of the flat pseudo-gradient."""
        return -(-size // self.per_replica)

    def init(self, params):
        flat, _ = ravel_pytree(params)
        self._size = int(flat.size)
        self._slice = self.slice_size(self._size)
        r = self.replicas
        stack = jax.jit(lambda p: jax.tree.map(lambda a: jnp.broadcast_to(a, (r,) + a.shape), p),
                        out_shardings=self._stacked())(params)
        inner_opt = jax.jit(jax.vmap(self.tx.init), out_shardings=self._stacked())(stack)
        outer = jax.device_put(params, replicated(self.mesh))
        outer_opt = jax.jit(self.outer_tx.init, out_shardings=replicated(self.mesh))(outer)
        self.steps_done = 0
        return (stack, inner_opt, outer, outer_opt) + self.init_extra()

    def init_extra(self) -> tuple:
        return ()

    def extra_specs(self) -> tuple:
        return ()

    # ------------------------------------------------------------------ the steps
    def _inner(self, params_l, opt_l, batch):
        """One inner step of this device's replica (data parallel inside the replica)."""
        p = jax.tree.map(lambda a: a[0], params_l)
        o = jax.tree.map(lambda a: a[0], opt_l)
        loss, grads = value_and_grad_microbatched(self.cfg, p, batch, self.setup.microbatches, local_axis=self.axis)
        flat, unravel = ravel_pytree(grads)
        grads = unravel(jax.lax.pmean(flat, self.axis))  # within the replica: one flat all-reduce
        updates, o = self.tx.update(grads, o, p)
        p = optax.apply_updates(p, updates)
        loss = jax.lax.pmean(loss, self.axis)  # this replica's share of the batch (inside the host)
        return p, o, loss if self.local_loss else loss[None]

    def my_slice(self, flat):
        """This device's slice of a flat vector (padded to per_replica equal slices)."""
        padded = jnp.pad(flat, (0, self._slice * self.per_replica - flat.size))
        return jax.lax.dynamic_slice(padded, (jax.lax.axis_index(self.axis) * self._slice,), (self._slice,))

    def average_slice(self, delta_slice, extra):
        """DiLoCo: the replicas' mean of this slice, uncompressed (fp32), one pmean."""
        return jax.lax.pmean(delta_slice, self.replica_axis), extra

    def _outer(self, p, outer, outer_opt, extra):
        flat_p, unravel = ravel_pytree(p)
        flat_o, _ = ravel_pytree(outer)
        averaged, extra = self.average_slice(self.my_slice(flat_o - flat_p), extra)
        full = jax.lax.all_gather(averaged, self.axis, tiled=True)[: self._size]  # inside the replica
        updates, outer_opt = self.outer_tx.update(unravel(full), outer_opt, outer)
        outer = optax.apply_updates(outer, updates)
        return outer, outer_opt, extra

    def _specs(self):
        s = P(self.replica_axis)
        return s, s, P(), P(), self.extra_specs()

    @property
    def local_loss(self) -> bool:
        """Several processes: each returns its own replica's loss (as if replicated: no
        cross-host collective per inner step). One process: the replicas' losses, averaged here."""
        return jax.process_count() > 1

    def _loss_spec(self):
        return P() if self.local_loss else P(self.replica_axis)

    def _host_loss(self, loss):
        return loss if self.local_loss else np.asarray(loss).mean()

    def step_fn(self):
        stacked, opt_spec, _, _, _ = self._specs()

        def inner(params_l, opt_l, batch):
            p, o, loss = self._inner(params_l, opt_l, batch)
            return jax.tree.map(lambda a: a[None], p), jax.tree.map(lambda a: a[None], o), loss

        step = jax.shard_map(inner, mesh=self.mesh, in_specs=(stacked, opt_spec, P((self.replica_axis, self.axis))),
                             out_specs=(stacked, opt_spec, self._loss_spec()), check_vma=False)
        return jax.jit(step, donate_argnums=(0, 1))

    def sync_fn(self):
        stacked, opt_spec, outer_spec, outer_opt_spec, extra_spec = self._specs()

        def sync(params_l, opt_l, outer, outer_opt, *rest):
            *extra, batch = rest
            p, o, loss = self._inner(params_l, opt_l, batch)
            outer, outer_opt, extra = self._outer(p, outer, outer_opt, tuple(extra))
            new = jax.tree.map(lambda a: a[None], outer)  # every replica restarts from the outer params
            return (new, jax.tree.map(lambda a: a[None], o), outer, outer_opt) + tuple(extra) + (loss,)

        in_specs = (stacked, opt_spec, outer_spec, outer_opt_spec) + extra_spec + (P((self.replica_axis, self.axis)),)
        out_specs = (stacked, opt_spec, outer_spec, outer_opt_spec) + extra_spec + (self._loss_spec(),)
        # all_gather's result is the same on every device of a replica, which JAX's
        # replication check cannot infer (as in zero2): the tests check the equalities
        step = jax.shard_map(sync, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
        return jax.jit(step, donate_argnums=tuple(range(4 + len(extra_spec))))

    def compile(self, state, batch):
        """Both programs: the inner step and the inner step + synchronization."""
        if self._jitted is None:
            self._jitted, self._sync_jitted = self.step_fn(), self.sync_fn()
        self._compiled = self._jitted.lower(state[0], state[1], batch).compile()
        self._sync_compiled = self._sync_jitted.lower(*state, batch).compile()
        return self._sync_compiled  # the larger of the two (memory check)

    def step(self, state, batch):
        if self._compiled is None:
            self.compile(state, batch)
        self.steps_done += 1
        if self.steps_done % self.inner_steps == 0:
            *state, loss = self._sync_compiled(*state, batch)
            return tuple(state), self._host_loss(loss)
        params, opt, loss = self._compiled(state[0], state[1], batch)
        return (params, opt) + tuple(state[2:]), self._host_loss(loss)

    def full_params(self, state):
        """The outer (synchronized) parameters: after a sync step every replica holds them."""
        return state[2]

    # ------------------------------------------------------------------ what crosses
    def sync_bytes_per_replica(self) -> float:
        """Bytes one replica sends to the others per synchronization (fp32 pseudo-gradient)."""
        return 4.0 * self._slice * self.per_replica


TECHNIQUE = DiLoCo
