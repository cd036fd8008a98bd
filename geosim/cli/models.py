"""geosim models: the model catalog, with layers, width and parameters, and the study's aliases."""

from __future__ import annotations

from geosim.cli.common import add_json_argument, print_json
from geosim.inputs.scenario import _catalog_doc, catalog_models, model_aliases, model_description

HELP = ("list the models: GPT-2's own sizes, the study's aliases (gpt2m, gpt2L, gpt2l), Llama-family shapes read "
        "from their config.json, layers, heads and parameters (total and active)")


def add_arguments(parser) -> None:
    add_json_argument(parser)


def run(args) -> int:

    aliases: dict[str, list[str]] = {}
    for alias, name in model_aliases().items():
        aliases.setdefault(name, []).append(alias)
    doc = _catalog_doc()
    basic = ("n_layer", "n_embd", "n_head", "vocab", "n_ctx")
    rows = [{"name": m.name, "aliases": aliases.get(m.name, []), "layers": m.n_layer, "width": m.n_embd,
             "heads": m.n_head, "context": m.n_ctx, "vocab": m.vocab, "parameters": m.num_params,
             "active_parameters": m.active_params,
             "shape": {k: v for k, v in m.shape_table().items() if k not in basic},
             "published_parameters": doc[m.name].get("published_params"), "source": doc[m.name].get("source"),
             "description": model_description(m.name)} for m in catalog_models().values()]
    if args.json:
        print_json(rows)
        return 0
    print(f"{'name':<16} {'aliases':<8} {'layers':>6} {'width':>6} {'heads':>5} {'kv':>3} {'params':>8} "
          f"{'active':>8}  description")
    for r in rows:
        kv = r["shape"].get("n_kv_head", r["heads"])
        print(f"{r['name']:<16} {','.join(r['aliases']) or '-':<8} {r['layers']:>6} {r['width']:>6} {r['heads']:>5} "
              f"{kv:>3} {_count(r['parameters']):>8} {_count(r['active_parameters']):>8}  {r['description']}")
    print("\nAn alias loads the same model under the alias's name (the study's run records use them).")
    return 0


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"
