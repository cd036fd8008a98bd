"""The four parallel training techniques (Alpa's four methods), on the JAX backend.

Each module defines a Technique subclass. A technique places the parameters, the
optimizer state and each batch on the devices, and jits one training step
(params, opt_state, batch) -> (params, opt_state, loss). All four compute the same
mathematical step (mean loss over the global batch, AdamW), so from the same seed
they produce the same losses up to float rounding: that is the test that the
parallelization is real and not a different model.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from geosim.base.errors import GeosimError
from geosim.live.registry import live_module, low_communication, synchronous
from geosim.live.train.model import GPTConfig, loss_fn

# from the one registry (geosim/live/registry.py): the modules of this folder that the simulator knows.
# Low-communication techniques make a different update (local steps, then a sync), so they are
# not in TECHNIQUES, whose members all compute the same synchronous step.
TECHNIQUES = synchronous()
LOWCOMM = low_communication()


@dataclass
class Setup:
    cfg: GPTConfig
    tx: optax.GradientTransformation
    global_batch: int
    microbatches: int = 1
    stages: int | None = None  # pipeshard only; None = one stage per host (two on a single host)
    devices: list | None = None  # None = all devices of all processes


def ordered_devices(devices=None) -> list:
    """Devices grouped by process (host): a mesh row is then one host."""
    return sorted(devices or jax.devices(), key=lambda d: (d.process_index, d.id))


def make_mesh(shape, names, devices) -> Mesh:
    # Auto axes: jax 0.10's make_mesh default (Explicit) rejects the classic in_shardings style.
    return Mesh(np.asarray(devices).reshape(shape), names, axis_types=(AxisType.Auto,) * len(names))


def value_and_grad_microbatched(cfg, params, batch, microbatches: int, local_axis: str | None = None, each=None):
    """Mean loss and gradient over `batch`, accumulated over equal microbatches (gradient
    accumulation): equal to the whole-batch mean, with 1/microbatches of the activations.

    local_axis: inside shard_map, return this device's own gradient. Without it, JAX
    differentiates replicated parameters by summing over devices itself, one all-reduce
    per tensor; the techniques prefer to reduce one flat buffer themselves.
    each: applied to every microbatch's (loss, grads) before they are summed (ZeRO-2's
    reduce-scatter into its sharded accumulator); the mean of its results is returned."""
    if local_axis is not None:
        params = jax.lax.pcast(params, local_axis, to="varying")

    def one(mb):
        result = jax.value_and_grad(lambda p: loss_fn(cfg, p, mb))(params)
        return each(*result) if each is not None else result

    if microbatches == 1:
        return one(batch)
    micro = batch.reshape(microbatches, batch.shape[0] // microbatches, batch.shape[1])
    # start from the first microbatch's result (not zeros) so the carry has the same
    # varying-over-devices type inside shard_map
    first = one(micro[0])
    total, _ = jax.lax.scan(lambda carry, mb: (jax.tree.map(jnp.add, carry, one(mb)), None), first, micro[1:])
    return jax.tree.map(lambda a: a / microbatches, total)


class Technique:
    name = "?"
    axis = "data"  # the mesh axis a batch is split over

    def __init__(self, setup: Setup):
        self.setup = setup
        self.cfg = setup.cfg
        self.tx = setup.tx
        self.devices = ordered_devices(setup.devices)
        self.n = len(self.devices)
        self.check()
        self.mesh = self.build_mesh()
        self._jitted = None
        self._compiled = None

    # -- to define in each technique
    def check(self):
        self.divides(self.setup.global_batch, self.n * self.setup.microbatches,
                     "global batch", "devices x microbatches", "--global-batch")

    def build_mesh(self) -> Mesh:  # one data axis over every device (Data, ZeRO-2, FSDP); others override
        return make_mesh((self.n,), (self.axis,), self.devices)

    def init(self, params): ...  # -> (params, opt_state) placed on the devices

    def batch_sharding(self) -> NamedSharding:  # each device a slice of the batch along the data axis
        return NamedSharding(self.mesh, P(self.axis))

    def step_fn(self): ...  # -> a jitted (params, opt_state, batch) -> (params, opt_state, loss)
    def full_params(self, state): ...  # -> the parameter tree (for checks across techniques)

    # -- shared
    @staticmethod
    def divides(value, by, what, by_what, option):
        if by <= 0 or value % by:
            raise GeosimError(f"{what} ({value}) must be divisible by {by_what} ({by})", key=option)

    def place_batch(self, batch: np.ndarray) -> jax.Array:
        """Every process holds the same global batch; each keeps the rows its devices own."""
        sharding = self.batch_sharding()
        return jax.make_array_from_callback(batch.shape, sharding, lambda index: batch[index])

    def compile(self, state, batch):
        """Lower and compile once; the compiled step is what runs (compile time measured apart)."""
        if self._jitted is None:
            self._jitted = self.step_fn()
        self._compiled = self._jitted.lower(*state, batch).compile()
        return self._compiled

    def step(self, state, batch):
        if self._compiled is None:
            self.compile(state, batch)
        params, opt_state, loss = self._compiled(*state, batch)
        return (params, opt_state), loss


def get(name: str, setup: Setup, **options) -> Technique:
    """The technique `name` on `setup`; `options` (live/train/lowcomm.py) go to diloco and
    sparseloco, the only techniques that take any."""
    module = live_module(name)
    return module.TECHNIQUE(setup, **options) if name in LOWCOMM else module.TECHNIQUE(setup)


def replicated(mesh):
    return NamedSharding(mesh, P())


def init_sharded(tx, params, param_shardings, mesh):
    """Place params with their shardings, and the optimizer state with the same shardings
    (the moments mirror the weights; scalars such as the step count are replicated)."""
    params = jax.device_put(params, param_shardings)
    shapes = jax.eval_shape(tx.init, params)
    opt_shardings = optax.tree_map_params(tx, lambda _, sharding: sharding, shapes, param_shardings,
                                          transform_non_params=lambda _: replicated(mesh))
    return params, jax.jit(tx.init, out_shardings=opt_shardings)(params), opt_shardings
