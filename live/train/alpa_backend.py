"""`--backend alpa`: the study's own stack (Alpa 0.2.x on Ray, Python 3.8/3.9, CUDA 11).

The same model, data and AdamW step as the JAX backend, parallelized by Alpa's four
methods. Alpa cannot be installed beside current JAX (it pins jax 0.3.22 and its own
CUDA jaxlib), so it is imported only here, behind a guard with a one-line message.
This module must stay importable without Alpa: the method mapping and the checks are
plain Python and are tested that way.
"""

from __future__ import annotations

import time

from geosim.base.errors import GeosimError
from geosim.techniques import get_technique, is_pipelined
from geosim.inputs.scenario import get_model

ALPA_MISSING = ("--backend alpa needs Alpa (Python 3.8/3.9, CUDA 11, jax 0.3.22; "
                "see https://alpa.ai/install.html); use --backend jax on this installation")


def import_alpa():
    try:
        import alpa  # noqa: PLC0415
    except ImportError:
        raise GeosimError(ALPA_MISSING) from None
    return alpa


def method_spec(technique: str, microbatches: int, n_layer: int, stages: int | None) -> tuple[str, dict]:
    """Our technique -> (alpa class name, keyword arguments), as the study configured them."""
    method = getattr(get_technique(technique), "ALPA_METHOD", None)  # declared by the technique's module
    if method is None:
        raise GeosimError(f"{technique!r} has no Alpa method (no ALPA_METHOD in geosim/techniques/{technique}.py)",
                          key="--technique")
    if not is_pipelined(technique):
        return method, {}
    layers = stages or 2  # a pipeline (Alpa's PipeshardParallel): cut into pipeline layers
    if n_layer % layers:
        raise GeosimError(f"n_layer ({n_layer}) must be divisible by stages ({layers})", key="--stages")
    # layer_option: cut the model into `layers` pipeline layers; "uniform": one stage each,
    # on equal sub-meshes (the study: two 1x2 meshes, one per VM)
    return method, {"num_micro_batches": microbatches, "layer_option": ("AutoLayerOption", {"layer_num": layers}),
                    "stage_option": "uniform"}


def make_method(alpa, technique, microbatches, n_layer, stages):
    name, kwargs = method_spec(technique, microbatches, n_layer, stages)
    if "layer_option" in kwargs:
        option_name, option_kwargs = kwargs["layer_option"]
        kwargs = {**kwargs, "layer_option": getattr(alpa, option_name)(**option_kwargs)}
    return getattr(alpa, name)(**kwargs)


def run_alpa(opts, ray_address: str | None):
    """Train with Alpa and return a live.train.Result (same measurements as the JAX backend)."""
    alpa = import_alpa()
    import jax
    import jax.numpy as jnp
    from flax.training import train_state

    from geosim.live.train import corpus
    from geosim.live.train.model import GPT, GPTConfig, alpa_flops_per_iter, cross_entropy, optimizer
    from geosim.live.train.loop import Result, is_out_of_memory, resolve_precision

    alpa.init(cluster="ray")  # attaches to the running Ray cluster (`ray start` on every VM first)
    spec = get_model(opts.model)
    n_ctx = opts.seq_len or spec.n_ctx
    dataset = corpus.load(opts.data, n_ctx, opts.tokenizer, opts.seed)
    devices = alpa.get_global_cluster().num_devices
    precision = resolve_precision(opts.precision, "gpu", "")
    cfg = GPTConfig(spec.n_layer, spec.n_embd, spec.n_head, dataset.vocab, n_ctx, precision)
    model = GPT(cfg)
    params = model.init(jax.random.PRNGKey(opts.seed), jnp.zeros((1, n_ctx), jnp.int32))["params"]
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=optimizer(opts.learning_rate))
    method = make_method(alpa, opts.technique, opts.microbatches, cfg.n_layer, opts.stages)

    @alpa.parallelize(method=method)
    def train_step(state, batch):
        def loss(params):
            logits = state.apply_fn({"params": params}, batch[:, :-1])
            return cross_entropy(logits, batch[:, 1:])

        grad_fn = alpa.value_and_grad if is_pipelined(opts.technique) else jax.value_and_grad
        value, grads = grad_fn(loss)(state.params)
        return state.apply_gradients(grads=grads), value

    result = Result(devices={"platform": "gpu", "kind": "alpa", "count": devices, "processes": 1})
    result.model_dims = {"n_layer": cfg.n_layer, "n_embd": cfg.n_embd, "n_head": cfg.n_head, "vocab": cfg.vocab, "n_ctx": n_ctx}
    per_epoch = dataset.steps_per_epoch(opts.batch)
    steps = opts.steps or (opts.epochs * per_epoch if opts.epochs else 20)
    result.workload = {"global_batch": opts.batch, "microbatches": opts.microbatches, "seq_len": n_ctx, "runtime": "alpa",
                       "tokens_per_epoch": per_epoch * opts.batch * n_ctx, "precision": precision}
    start = time.perf_counter()
    try:
        for step in range(steps):
            t = time.perf_counter()
            state, loss = train_step(state, dataset.batch(step, opts.batch, opts.seed))
            loss = float(loss)
            result.step_times.append(time.perf_counter() - t)
            result.losses.append(loss)
            if step == 0:
                result.compile_time_s = result.step_times[0]
    except KeyboardInterrupt:
        result.status = "interrupted"
    except Exception as exc:
        result.status = "out-of-memory" if is_out_of_memory(exc) else "failed"
        result.error = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"[:500]
    result.total_time_s = time.perf_counter() - start
    timed = result.step_times[1 + opts.warmup:] or result.step_times[1:]
    if timed:
        result.time_per_iteration_s = sum(timed) / len(timed)
        result.tokens_per_s = opts.batch * n_ctx / result.time_per_iteration_s
        result.tflops_per_gpu = alpa_flops_per_iter(cfg, opts.batch) / result.time_per_iteration_s / devices / 1e12
    alpa.shutdown()
    return result
