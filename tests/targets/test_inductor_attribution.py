"""Inductor module attribution from the compiler's provenance: shares and consistency.

Expectations come from the model's own module tree (types found by named_modules) and
from the op words inductor puts in each fused kernel's name, not from porter's output.
"""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import torch
from torch import nn

from porter.capture.run import CaptureOptions, capture, module_share
from porter.capture.models import load_model
from porter.targets import get_stack
from porter.targets.inductor_attribution import RegionRecord, common_path, handle_members, handle_modules, stack_path

OPTS = CaptureOptions(steps=2, warmup=1, repeats=2, activations=False)
KERNEL = re.compile(r"^graph_\d+_(cpp_\w+)$")
# op word in a fused kernel's name -> module type that performs it in the built-in models
WORD_TYPES = {"layer_norm": nn.LayerNorm, "batch_norm": nn.BatchNorm2d, "convolution": nn.Conv2d,
              "max_pool2d": nn.MaxPool2d, "relu": nn.ReLU, "gelu": (nn.GELU, nn.Module)}


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> dict[str, tuple[pd.DataFrame, dict]]:
    out = {}
    for name in ("transformer", "mlp", "cnn"):
        r = capture(name, "cpu:inductor", tmp_path_factory.mktemp("ind") / name, OPTS)
        out[name] = (r.ops, r.manifest)
    return out


def modules_of(name: str) -> dict[str, nn.Module]:
    return {n.replace(".", "/"): m for n, m in load_model(name).module.named_modules()}


def kernel_ops(ops: pd.DataFrame) -> pd.DataFrame:
    """Fused C++ kernel ranges of the profiled steps."""
    return ops[(ops["step"] >= 0) & ops["name"].str.match(KERNEL.pattern)]


def test_stack_path_strips_any_root_local():
    assert stack_path("L['self'].blocks[0].attn") == "blocks/0/attn"
    assert stack_path("L['fn'].0") == "0"  # nn.Sequential compiled directly: dynamo names it fn
    # a root whose forward is a (*args, **kwargs) wrapper (transformers' output decorators)
    assert stack_path("L['args'][0].model.layers[0].self_attn") == "model/layers/0/self_attn"
    assert stack_path("L['self']._modules['features']._modules['3']") == "features/3"


def test_deepest_common_rule_skips_recomputed_nodes():
    rec = RegionRecord(handle_nodes={"k_a:1": ["emb", "ln1"], "k_b:2": ["emb", "res", "ln2"], "k_c:3": ["emb"]},
                       node_modules={"emb": "tok", "ln1": "blocks/0/ln1", "res": "blocks/0", "ln2": "blocks/0/ln2"})
    got = handle_modules(rec)
    assert got["k_a:1"] == ""  # tok and blocks/0/ln1 share only the root
    assert got["k_b:2"] == "blocks/0"  # emb was computed by k_a: not counted again
    assert got["k_c:3"] == "tok"  # only recomputation: its own nodes decide
    assert common_path(["a/b/c", "a/b", "a/b/d"]) == "a/b" and common_path([]) == ""
    # a call spanning modules lists them with their share of its estimated cost
    rec.node_costs = {"emb": ("aten::add", 8.0), "ln1": ("aten::var_mean", 6.0), "res": ("aten::add", 2.0),
                      "ln2": ("aten::var_mean", 6.0)}
    members = {h: json.loads(m) if m else [] for h, m in handle_members(rec).items()}
    assert members["k_a:1"] == [["tok", "aten::add", pytest.approx(8 / 14)], ["blocks/0/ln1", "aten::var_mean", pytest.approx(6 / 14)]]
    assert members["k_b:2"] == [["blocks/0/ln2", "aten::var_mean", 0.75], ["blocks/0", "aten::add", 0.25]]
    assert members["k_c:3"] == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["transformer", "mlp", "cnn"])
def test_one_region_and_every_fused_kernel_matched(captured, name):
    ops, m = captured[name]
    info = m["stack_info"]
    assert info["compiled_regions"] == 1 and info["graph_breaks"] == 0
    known = modules_of(name)
    found = set(ops["module"]) - {""}
    assert found <= set(known), found - set(known)
    # every extern matmul/conv call site gets the module of its one FX node
    ext = ops[ops["name"].isin(["aten::addmm", "aten::mm", "aten::bmm", "aten::convolution"]) & (ops["step"] >= 0)
              & (ops["parent_id"].map(dict(zip(ops["op_id"], ops["name"]))).fillna("") != "aten::linear")]
    assert (ext["module"] != "").all(), ext[ext["module"] == ""]["name"].tolist()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["transformer", "mlp", "cnn"])
def test_fused_kernel_module_holds_its_ops(captured, name):
    """A fused kernel's module contains a module of the type that does each op in its name."""
    ops, _ = captured[name]
    known = modules_of(name)
    checked = 0
    for row in kernel_ops(ops).itertuples():
        if not row.module:
            continue
        sub = [m for p, m in known.items() if p == row.module or p.startswith(row.module + "/")]
        for word, types in WORD_TYPES.items():
            if word in row.name:
                assert any(isinstance(m, types) for m in sub), (row.name, row.module)
                checked += 1
        if "_softmax" in row.name:
            assert any(type(m).__name__ == "CausalSelfAttention" for m in sub), (row.name, row.module)
            checked += 1
    assert checked > 0


@pytest.mark.slow
def test_mlp_gelu_and_transformer_softmax_land_on_their_modules(captured):
    ops, _ = captured["mlp"]
    known = modules_of("mlp")
    gelu = kernel_ops(ops)[kernel_ops(ops)["name"].str.contains("gelu")]
    assert len(gelu) and all(isinstance(known[m], nn.GELU) for m in gelu["module"])
    # the two GELUs share one kernel but each call lands on its own module
    assert set(gelu["module"]) == {p for p, m in known.items() if isinstance(m, nn.GELU)}
    ops, _ = captured["transformer"]
    known = modules_of("transformer")
    sm = kernel_ops(ops)[kernel_ops(ops)["name"].str.contains("_softmax")]
    assert set(sm["module"]) == {p for p, m in known.items() if type(m).__name__ == "CausalSelfAttention"}


@pytest.mark.slow
@pytest.mark.parametrize("name,bound", [("transformer", 0.2), ("mlp", 0.25), ("cnn", 0.05)])
def test_module_share_of_device_time(captured, name, bound):
    """Kernels get paths; what stays '' is root-forward work and the compiled region's own glue.

    transformer: the embedding sum (root forward) fuses into blocks/0/ln1's kernel and the
    last residual into ln_f's, so both kernels are root by the deepest-common rule
    (measured share 0.66-0.75 with ~0.2 in those two kernels); cnn: the wrapper glue
    ('## Call CompiledFxGraph', dynamo cache lookup) is ~1 ms of a ~3-5 ms forward on 2
    cores (measured 0.6-0.98); mlp: glue is small next to three 512-wide matmuls (0.97-0.98, but
    0.30 in one fresh-clone CI run, 2026-12-07, with every kernel attributed: a glue spike).
    Two profiled steps on 2 shared cores are noisy (one kernel took 10 ms in one run, 0.07 ms
    in the next; transformer share 0.27-0.75 over runs), so the time bounds are loose and
    the deterministic check is on call sites: every one but the root-rule kernels has a path.
    """
    ops, m = captured[name]
    info = m["stack_info"]
    root_rule = {"transformer": 2, "mlp": 0, "cnn": 0}[name]  # kernels 0 and 9 of the transformer, see above
    assert info["wrapper_calls_with_module"] == info["wrapper_calls"] - root_rule, info
    share = module_share(ops)
    assert share >= bound, share
    assert m["stats"]["module_share"] == pytest.approx(share)
    # within the fused kernels alone, only deepest-common-is-root ones stay unattributed
    k = kernel_ops(ops)
    if name != "transformer":
        assert (k["module"] != "").all(), k.loc[k["module"] == "", "name"].tolist()


@pytest.mark.slow
def test_recording_config_keeps_the_program():
    """The provenance/caching config used for capture generates the same kernels, in the same order."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.compile_fx import compile_fx

    from porter.targets.inductor import RECORDING_CONFIG
    from porter.targets.inductor_attribution import parse_wrapper, recording_inner

    def kernels(patch: dict) -> list[str]:
        records: list[RegionRecord] = []
        spec = load_model("mlp")
        torch._dynamo.reset()
        fn = torch.compile(spec.module, backend=lambda gm, ex: compile_fx(gm, ex, inner_compile=recording_inner(records)))
        with inductor_config.patch({**patch, "fx_graph_cache": False}), functorch_config.patch(enable_autograd_cache=False), \
                torch.no_grad():
            fn(*spec.example_inputs)
        return [c.callee for r in records for c in parse_wrapper(r.source, {})]

    plain = kernels({"cpp.enable_kernel_profile": True})
    assert plain and plain == kernels(RECORDING_CONFIG)
    assert get_stack("inductor").module_attribution == "compiler"


def test_a_global_function_in_the_module_stack_is_not_a_module_path():
    """dynamo can list a module-level function as a module (G['...'].fn); its nodes take the
    innermost module reached from the root instead, or their neighbours' when there is none."""
    from porter.targets.inductor_attribution import innermost_path

    g = "G['__import_transformers_dot_models_dot_llama_dot_modeling_llama'].apply_rotary_pos_emb"
    layer = "L['self'].model.layers[0].self_attn"
    assert innermost_path({"a": (layer, object), "b": (g, object)}) == "model/layers/0/self_attn"
    assert innermost_path({"b": (g, object)}) is None
    assert innermost_path({"a": (layer, object)}) == "model/layers/0/self_attn"


def test_an_extern_call_takes_its_own_ops_module_not_its_inputs_producers():
    """Inductor's handle for an extern call (the SDPA fallback, a GEMM) lists its inputs'
    producers too; a fused kernel before it computed them. The deepest-common rule over all of
    them sent Llama's attention call, and every allocation under it, to the model (a phantom
    +400 us/step in `model/model` and the same win in each self_attn on llama_base)."""
    sdpa = "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default:8"
    rope = "cpp_fused__scaled_dot_product_flash_attention_for_cpu_cos_mul_sin_3:7"
    rec = RegionRecord(
        handle_nodes={rope: ["cos", "q_embed", "attn"], sdpa: ["cos", "q_embed", "attn"],
                      "extern_kernels.mm:9": ["view_5", "mm_3"]},
        node_modules={"cos": "model/rotary_emb", "q_embed": "model/layers/0/self_attn",
                      "attn": "model/layers/0/self_attn", "view_5": "model/layers/0/mlp", "mm_3": "model/layers/0/mlp/up"},
        node_costs={"cos": ("aten::cos", 64.0), "q_embed": ("aten::add", 32.0),
                    "attn": ("aten::_scaled_dot_product_flash_attention_for_cpu", 5000.0),
                    "view_5": ("aten::view", 0.0), "mm_3": ("aten::mm", 9000.0)})
    got = handle_modules(rec)
    assert got[sdpa] == "model/layers/0/self_attn"  # its own node, though the kernel before computed all three
    assert got["extern_kernels.mm:9"] == "model/layers/0/mlp/up"
    # the fused kernel only lays out the SDPA's input: the attention node costs nothing there
    members = json.loads(handle_members(rec)[rope])
    assert [m[0] for m in members] == ["model/rotary_emb", "model/layers/0/self_attn"]
    assert members[0][2] == pytest.approx(64 / 96)


@pytest.mark.slow
def test_every_attention_call_of_a_stock_llama_lands_in_its_attention_module(tmp_path):
    """Live: transformers' Llama (2 layers) compiled by inductor: each profiled SDPA call, and
    everything it launched, carries its own layer's self_attn path."""
    from tests.e2e.test_live_identity import LIBRARY

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ops = capture(f"{LIBRARY}:llama_tiny", "cpu:inductor", tmp_path / "t", OPTS).ops
    finally:
        torch.set_num_threads(threads)
    ops = ops[ops["step"] >= 0]
    sdpa = ops[ops["name"].str.contains("scaled_dot_product", regex=False) & ~ops["name"].str.startswith("graph_")]
    assert len(sdpa) == 2 * OPTS.steps, sdpa["name"].tolist()  # one per layer per step
    layer = sdpa["module"].str.extract(r"layers/(\d+)/self_attn$")[0]
    assert layer.notna().all(), sorted(set(sdpa["module"]))
    assert sorted(layer.unique()) == ["0", "1"]
    kids = ops[ops["parent_id"].isin(sdpa["op_id"])]
    assert len(kids) and kids["module"].str.endswith("/self_attn").all(), sorted(set(kids["module"]))
