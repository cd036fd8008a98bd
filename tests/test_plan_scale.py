"""The planner at scale: structured search against exhaustive search, the GPT-3 sizes, large options."""

from geosim.scenario import get_model


def test_gpt3_sizes_match_the_papers_table():
    # Brown et al. 2020, Table 2.1: n_params, n_layers, d_model (13B's d_model as 40 heads x 128)
    table = {"gpt3-1.3b": (1.3e9, 24, 2048), "gpt3-2.7b": (2.7e9, 32, 2560), "gpt3-6.7b": (6.7e9, 32, 4096),
             "gpt3-13b": (13.0e9, 40, 5120)}
    for name, (params, layers, width) in table.items():
        m = get_model(name)
        assert (m.n_layer, m.n_embd, m.n_ctx) == (layers, width, 2048)
        assert abs(m.num_params - params) / params < 0.03, (name, m.num_params)
