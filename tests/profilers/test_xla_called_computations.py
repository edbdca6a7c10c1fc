"""Computations an HLO instruction calls are its work (profilers.xla_hlo.HloModuleIndex.caller).

A sort's comparator, a reduce's ``to_apply``, a while's body and condition: XLA names their
instructions ``lt``, ``reduce_sum`` or nothing, without a path to an op, and before this their
time fell to module '' (a planted median's sort read 60% "compare (no module)"). Each inherits
its caller's module and op call; only a fusion's body is split among the modules it holds.
"""

from __future__ import annotations

import json

import pytest

from porter.core.elementcost import element_weight
from porter.core.tags import CALL_TAG, MODULE_TAG
from profilers.xla_hlo import HloIndex, index_module, scope_and_op
from profilers.xspace_proto import parse_hlo_proto


def _name(*modules: str, call: str, op: str) -> str:
    return "/".join(["jit(f)", MODULE_TAG, *(MODULE_TAG + m for m in modules), CALL_TAG + call, op])


MEDIAN = _name("blk", "blk.act", call="median#0", op="sort")
SUM = _name("head", call="sum#0", op="reduce_sum")
LOOP = _name("loop", call="scan#0", op="while")
INNER = _name("loop", "loop.cell", call="mul#0", op="mul")
GELU = _name("blk", "blk.act", call="gelu#0", op="tanh")
FC = _name("blk", "blk.fc", call="linear#0", op="add")

TEXT = f'''
HloModule m, entry_computation_layout={{(f32[4,8]{{1,0}}, f32[8]{{0}})->(f32[4]{{0}}, f32[8]{{0}}, f32[8]{{0}})}}

cmp {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ne = pred[] compare(a, a), direction=NE, metadata={{op_name="ne"}}
  ROOT lt = pred[] compare(a, b), direction=LT, metadata={{op_name="lt"}}
}}

add {{
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y), metadata={{op_name="reduce_sum"}}
}}

body {{
  st = (s32[], f32[8]{{0}}) parameter(0)
  i = s32[] get-tuple-element(st), index=0
  v = f32[8]{{0}} get-tuple-element(st), index=1
  one = s32[] constant(1)
  next = s32[] add(i, one)
  twice = f32[8]{{0}} add(v, v)
  cell = f32[8]{{0}} multiply(twice, v), metadata={{op_name="{INNER}"}}
  ROOT out = (s32[], f32[8]{{0}}) tuple(next, cell)
}}

cond {{
  cs = (s32[], f32[8]{{0}}) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  three = s32[] constant(3)
  ROOT more = pred[] compare(ci, three), direction=LT
}}

fused {{
  fp = f32[8]{{0}} parameter(0)
  t = f32[8]{{0}} tanh(fp), metadata={{op_name="{GELU}"}}
  w = f32[8]{{0}} add(t, fp), metadata={{op_name="reduce_window_sum"}}
  ROOT fa = f32[8]{{0}} add(w, t), metadata={{op_name="{FC}"}}
}}

ENTRY main {{
  p = f32[4,8]{{1,0}} parameter(0)
  q = f32[8]{{0}} parameter(1)
  sorted = f32[4,8]{{1,0}} sort(p), dimensions={{1}}, to_apply=cmp, metadata={{op_name="{MEDIAN}"}}
  zero = f32[] constant(0)
  r = f32[4]{{0}} reduce(sorted, zero), dimensions={{1}}, to_apply=add, metadata={{op_name="{SUM}"}}
  start = s32[] constant(0)
  init = (s32[], f32[8]{{0}}) tuple(start, q)
  loop = (s32[], f32[8]{{0}}) while(init), condition=cond, body=body, metadata={{op_name="{LOOP}"}}
  lv = f32[8]{{0}} get-tuple-element(loop), index=1
  f = f32[8]{{0}} fusion(q), kind=kLoop, calls=fused
  ROOT res = (f32[4]{{0}}, f32[8]{{0}}, f32[8]{{0}}) tuple(r, lv, f)
}}
'''


def _index():
    from jax._src.lib import xla_client

    module = xla_client.hlo.hlo_module_from_text(TEXT).as_serialized_hlo_module_proto()
    proto = parse_hlo_proto(b"")
    proto.hlo_module.ParseFromString(module)
    return index_module(proto)


def _module_and_call(idx, name: str) -> tuple[str, str]:
    hit = HloIndex(by_program={1: idx}).lookup(1, "m", name)
    return hit.module, hit.call


def test_called_computations_inherit_their_callers_module_and_op_call():
    idx = _index()
    for name in ("ne", "lt"):  # the sort's comparator
        assert _module_and_call(idx, name) == ("blk/act", "median#0"), name
    assert scope_and_op(idx.op_name_of(idx.instrs["lt"]))[1] == "lt"  # its own op, its caller's scope
    assert _module_and_call(idx, "s") == ("head", "sum#0")  # the reduce's to_apply
    for name in ("next", "twice", "more"):  # a while's body and condition, named by nothing
        assert _module_and_call(idx, name) == ("loop", "scan#0"), name
    assert _module_and_call(idx, "cell") == ("loop/cell", "mul#0")  # a body op with its own module keeps it
    assert _module_and_call(idx, "sorted") == ("blk/act", "median#0")


def test_only_a_fusion_is_split_among_modules():
    idx = _index()
    index = HloIndex(by_program={1: idx})
    sort = index.lookup(1, "m", "sorted")
    assert sort.members == "" and sort.call_members == ""  # a comparator is not fused work
    assert index.lookup(1, "m", "r").members == "" and index.lookup(1, "m", "loop").members == ""
    fusion = index.lookup(1, "m", "f")
    members = {m: share for m, _op, share in json.loads(fusion.members)}
    # the member XLA named "reduce_window_sum" (no path) is the fusion's own (blk/fc), never ''
    assert set(members) == {"blk/act", "blk/fc"}
    # priced per output element (porter.core.elementcost): one tanh (12 adds) against two adds
    tanh, add = element_weight("tanh"), element_weight("add")
    assert tanh == 12.0 and add == 1.0
    assert members["blk/act"] == pytest.approx(tanh / (tanh + 2 * add))
    assert members["blk/fc"] == pytest.approx(2 * add / (tanh + 2 * add))
    calls = {c for _m, c, _s in json.loads(fusion.call_members)}
    assert calls == {"gelu#0", "linear#0"}
