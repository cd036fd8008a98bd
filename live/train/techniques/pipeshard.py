"""Pipeline + intra-op sharding (alpa.PipeshardParallel): the layers are cut into
stages, each stage on its own sub-mesh (one per host by default, as in the study's
two 1x2 meshes, one per VM); the batch is cut into microbatches that flow through
the stages (a GPipe schedule); inside a stage the weights are tensor-sharded over
the stage's devices.

Written as one SPMD program over a (stage, model) mesh: shard_map is manual over
`stage` (each stage runs its own layers and passes activations to the next with
ppermute, i.e. point-to-point sends) and automatic over `model` (XLA shards the
stage's matmuls, as in the Shard technique). The backward pass is the transpose of
the forward schedule: activation gradients flow back through the reversed ppermutes.
Only the activations crossing a stage boundary go over the network, which is why this
technique suffers least from WAN latency.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from geosim.live.train.model import block_apply, embed_apply, head_loss
from geosim.live.train.techniques import Technique, init_sharded, make_mesh, replicated
from geosim.live.train.techniques.shard import tree_specs


def stack_blocks(params, n_layer):
    """{'h_0': ..., 'h_{L-1}': ...} -> {'blocks': leaves stacked along a leading layer axis}."""
    blocks = jax.tree.map(lambda *a: jnp.stack(a), *[params[f"h_{i}"] for i in range(n_layer)])
    return {"wte": params["wte"], "wpe": params["wpe"], "ln_f": params["ln_f"], "blocks": blocks}


def unstack_blocks(params, n_layer):
    out = {k: v for k, v in params.items() if k != "blocks"}
    for i in range(n_layer):
        out[f"h_{i}"] = jax.tree.map(lambda a: a[i], params["blocks"])
    return out


class Pipeshard(Technique):
    name = "pipeshard"

    def check(self):
        import jax as _jax  # noqa: PLC0415

        stages = self.setup.stages
        if stages is None:  # one stage per host; on a single host, two stages
            hosts = _jax.process_count()
            stages = hosts if hosts > 1 else min(2, self.n)
        self.stages = stages
        self.divides(self.n, stages, "devices", "stages", "--stages")
        self.divides(self.cfg.n_layer, stages, "n_layer", "stages", "--stages")
        self.per_stage = self.n // stages
        self.divides(self.cfg.n_embd, self.per_stage, "n_embd", "devices per stage", "--stages")
        self.divides(self.setup.global_batch, self.setup.microbatches, "global batch", "microbatches", "--microbatches")

    def build_mesh(self):
        return make_mesh((self.stages, self.per_stage), ("stage", "model"), self.devices)

    def batch_sharding(self):
        return replicated(self.mesh)  # stage 0 reads the inputs, the last stage the targets

    def init(self, params):
        params = stack_blocks(params, self.cfg.n_layer)
        specs = {k: tree_specs(v, "model") for k, v in params.items() if k != "blocks"}
        specs["blocks"] = tree_specs(params["blocks"], "model", lead=("stage",))
        self._param_shardings = jax.tree.map(lambda s: NamedSharding(self.mesh, s), specs)
        params, opt_state, self._opt_shardings = init_sharded(self.tx, params, self._param_shardings, self.mesh)
        return params, opt_state

    def pipeline_loss(self, shared_flat, blocks, batch):
        """Runs on one stage (manual over `stage`): its layers, the GPipe schedule, the loss.
        The parameters every stage holds (embeddings, final norm) arrive as one flat vector,
        so their gradients are summed over the stages in a single all-reduce: gloo pays a
        round trip per tensor, which over a WAN would otherwise cost one RTT each."""
        cfg, S, M = self.cfg, self.stages, self.setup.microbatches
        params = {**self._unravel_shared(shared_flat), "blocks": blocks}
        stage = jax.lax.axis_index("stage")
        micro = batch.reshape(M, batch.shape[0] // M, batch.shape[1])
        inputs, targets = micro[:, :, :-1], micro[:, :, 1:]
        embedded = jax.vmap(lambda idx: embed_apply(cfg, params, idx))(inputs)  # used by stage 0 only

        def run_stage(x):  # this stage's layers, one after another
            return jax.lax.scan(lambda h, p: (block_apply(cfg, p, h), None), x, params["blocks"])[0]

        def tick(carry, t):
            received, outputs = carry
            x = jnp.where(stage == 0, embedded[jnp.minimum(t, M - 1)], received)
            y = run_stage(x)
            # the last stage finishes microbatch t-(S-1); earlier ticks write slot 0, overwritten later
            outputs = jax.lax.dynamic_update_index_in_dim(outputs, y, jnp.maximum(t - (S - 1), 0), 0)
            if S > 1:
                y = jax.lax.ppermute(y, "stage", [(i, i + 1) for i in range(S - 1)])
            return (y, outputs), None

        # each stage holds different activations: the carry is varying over `stage`
        init = jax.lax.pcast((jnp.zeros_like(embedded[0]), jnp.zeros_like(embedded)), "stage", to="varying")
        (_, outputs), _ = jax.lax.scan(tick, init, jnp.arange(M + S - 1))

        # Every stage computes the head, only the last stage's loss counts. (A lax.cond on the
        # stage index would skip the work, but XLA's CPU runtime deadlocks when only some devices
        # enter a branch holding collectives; the head is ~1/6 of gpt2m's FLOPs.)
        losses = jax.vmap(lambda x, y: head_loss(cfg, params, x, y))(outputs, targets)
        loss = jnp.where(stage == S - 1, losses.mean(), 0.0)
        return jax.lax.psum(loss, "stage")

    def step_fn(self):
        from jax.flatten_util import ravel_pytree

        pipeline = jax.shard_map(self.pipeline_loss, mesh=self.mesh, in_specs=(P(), P("stage"), P()), out_specs=P(),
                                 axis_names={"stage"})

        def loss_fn(params, batch):
            shared_flat, self._unravel_shared = ravel_pytree({k: v for k, v in params.items() if k != "blocks"})
            return pipeline(shared_flat, params["blocks"], batch)

        def step(params, opt_state, batch):
            loss, grads = jax.value_and_grad(loss_fn)(params, batch)
            updates, opt_state = self.tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        return jax.jit(step, donate_argnums=(0, 1),
                       out_shardings=(self._param_shardings, self._opt_shardings, replicated(self.mesh)))

    def full_params(self, state):
        return unstack_blocks(state[0], self.cfg.n_layer)


TECHNIQUE = Pipeshard
