"""Model specs: built-ins, factories (a model file imports the modules beside it), fingerprints, and the errors users see."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from porter.core.errors import PorterError
from porter.capture.models import fingerprint, load_model
from porter.capture.models.zoo import BUILTINS
from tests.conftest import run_porter

BAD = Path(__file__).parents[1] / "models" / "bad_models.py"


@pytest.mark.parametrize("name", list(BUILTINS))
def test_builtin_is_deterministic_and_runs(name):
    a, b = load_model(name), load_model(name)
    assert not a.module.training
    assert a.fingerprint == b.fingerprint
    with torch.no_grad():
        out_a, out_b = a.module(*a.example_inputs), b.module(*b.example_inputs)
    assert torch.equal(out_a, out_b)  # same seed -> same weights and inputs
    assert torch.isfinite(out_a).all()


def test_transformer_shape_and_attention_ops():
    spec = load_model("transformer")
    names = dict(spec.module.named_modules())
    assert {"blocks.0.attn.q", "blocks.0.attn.k", "blocks.0.attn.v", "blocks.1.mlp.act", "ln_f", "head"} <= set(names)
    assert spec.input_shapes() == [[2, 64]]
    with torch.no_grad():
        assert spec.module(*spec.example_inputs).shape == (2, 64, 512)


def test_fingerprint_tracks_structure_not_values():
    a = load_model("mlp").module
    b = load_model("mlp").module
    with torch.no_grad():
        b[0].weight.add_(1.0)
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != load_model("cnn").fingerprint


def test_unknown_model_lists_builtins():
    with pytest.raises(PorterError) as exc:
        load_model("resnet9000")
    for name in BUILTINS:
        assert name in str(exc.value)
    r = run_porter("capture", "resnet9000", "--on", "cpu")
    assert r.returncode == 2 and "transformer" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("factory,problem", [
    ("not_a_pair", "returned Linear, not (torch.nn.Module, tuple_of_inputs)"),
    ("bad_inputs", "as inputs, not a tuple of tensors"),
    ("raises", "raised ValueError: weights file missing"),
    ("missing_factory", "has no callable 'missing_factory'"),
])
def test_bad_factory_is_named(factory, problem):
    ref = f"{BAD}:{factory}"
    with pytest.raises(PorterError) as exc:
        load_model(ref)
    assert problem in str(exc.value)
    assert factory in str(exc.value)


def test_file_factory_loads():
    spec = load_model(f"{BAD}:nan_model")
    assert spec.name == "nan_model" and spec.source.endswith(":nan_model")
    assert spec.module_paths() == ["fc"]


def test_models_command_lists_builtins_with_params():
    r = run_porter("models")
    assert r.returncode == 0, r.stderr
    for name in BUILTINS:
        assert name in r.stdout
        assert f"{load_model(name).param_count:,}" in r.stdout


def test_a_model_file_imports_its_neighbours_by_name(tmp_path):
    (tmp_path / "shared_blocks.py").write_text(
        "import torch\n\nclass Twice(torch.nn.Module):\n    def forward(self, x):\n        return 2 * x\n")
    (tmp_path / "my_models.py").write_text(
        "import torch\nfrom shared_blocks import Twice\n\n"
        "def twice():\n    return Twice(), (torch.ones(3),)\n")
    before = list(sys.path)
    spec = load_model(f"{tmp_path / 'my_models.py'}:twice")
    assert sys.path == before and str(tmp_path) not in sys.path
    assert torch.equal(spec.module(*spec.example_inputs), torch.full((3,), 2.0))
    sys.modules.pop("shared_blocks", None)
