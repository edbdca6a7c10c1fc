"""XLA's own instructions charged to the module that reads them (profilers.xla_hlo.readers_scope).

XLA:CPU inserts instructions that no traced op wrote: a layout transpose of each convolution's
weights, run at every step since the weights are arguments of the program. They carry no path to
an op, so before readers_scope their time fell to the model's root: resnet_wide on XLA read a
root group of 2.6 ms per step against eager's 89 us of flatten and view (29x).
"""

from __future__ import annotations

from porter.bundles.bundle import load_bundle
from porter.capture.run import capture
from porter.core.tags import MODULE_TAG
from profilers.xla_hlo import HloModuleIndex, _Instr, scope_and_op
from tests.e2e.test_live_identity import LIBRARY, LIVE_OPTS


def _path(*modules: str, op: str) -> str:
    return "/".join(["jit(f)", MODULE_TAG, *(MODULE_TAG + m for m in modules), op])


def _index(instrs: list[_Instr]) -> HloModuleIndex:
    idx = HloModuleIndex(name="m", computations={0: instrs})
    for i in instrs:
        idx.instrs[f"i{i.id}"] = i
        for o in i.operands:
            idx.users.setdefault((0, o), []).append(i)
    return idx


def test_readers_in_several_layers_give_the_module_around_them_not_their_container():
    # a mask hoisted out of three layers: the layers are transformer.h.0..2 of a ModuleList that
    # never runs a forward of its own, so the scope they share is transformer's
    mask = _Instr("broadcast", "", "", (), id=1, computation=0)
    readers = [_Instr("fusion", _path("transformer", f"transformer.h.{k}", f"transformer.h.{k}.attn", op="add"), "", (),
                      operands=(1,), id=10 + k, computation=0) for k in range(3)]
    idx = _index([mask, *readers])
    assert scope_and_op(idx.op_name_of(mask)) == ("transformer", "broadcast")
    # one reader: its own module; an instruction nobody reads keeps its (empty) name
    idx = _index([mask, readers[1]])
    assert scope_and_op(idx.op_name_of(mask)) == ("transformer/h/1/attn", "broadcast")
    assert idx.op_name_of(_Instr("copy", "", "", (), id=99, computation=0)) == ""


def test_readers_without_a_module_tag_name_nothing():
    # a stranger's trace (no porter tags): its scopes are not porter's to merge
    mask = _Instr("broadcast", "", "", (), id=1, computation=0)
    reader = _Instr("fusion", "jit(f)/blocks.0/attn/add", "", (), operands=(1,), id=2, computation=0)
    assert _index([mask, reader]).op_name_of(mask) == ""


def test_a_conv_nets_weight_transposes_are_charged_to_their_convolutions(tmp_path):
    capture(f"{LIBRARY}:small_resnet", "xla", tmp_path / "tgt", LIVE_OPTS)
    ops = load_bundle(tmp_path / "tgt").ops
    transposes = ops[ops["name"].str.startswith("transpose_copy_fusion")]
    assert len(transposes) >= 8  # one per convolution weight per step, at least
    convs = {"stem/0", "layer1/conv1", "layer1/conv2", "layer2/conv1", "layer2/conv2", "layer2/down/0",
             "layer3/conv1", "layer3/conv2", "layer3/down/0"}
    assert set(transposes["module"]) <= convs, sorted(set(transposes["module"]))
    assert len(set(transposes["module"])) >= 6  # each convolution's own, not one for all
    assert not (ops["module"] == "").any() or ops.loc[ops["module"] == "", "device_us"].sum() < 0.02 * ops["device_us"].sum()
