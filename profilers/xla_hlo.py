"""What an HLO op is in model terms: its module scope, its jax primitive, what it fuses.

XLA keeps, per instruction, the op_name metadata JAX wrote while tracing
(``jit(f)/jit(main)/blocks.0/attn/dot_general``). An XSpace carries every executed
program's HloProto on its ``/host:metadata`` plane, so the scope of any HLO op in the
trace can be looked up by (program, op name) without recompiling anything.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from porter.core.opclass import classify
from profilers.hlo_cost import HloCosts
from porter.core.elementcost import element_weight
from porter.core.schema import MODULE_SEP, NO_MODULE, encode_call_members, encode_members
from porter.core.tags import CALL_TAG, MODULE_TAG, call_from_tags, kernel_index, kernel_op, module_from_tags

# What scope_and_op drops from an op_name path, so only the user's named scopes remain:
# * `jit(...)`, `pjit(...)`, `pmap(...)` components (function boundaries, not scopes);
# * transformation wrappers `transpose(X)`, `jvp(X)`, `vmap(X)`, `remat(X)`... are replaced by
#   X, the scope they were applied to, so backward ops land in their forward module; the
#   same scope repeated by nested wrappers (`transpose(jvp(blk))/jvp(blk)`) is kept once;
# * jax-internal structure: `closed_call`, `checkpoint`, `rematted_computation`, `remat`,
#   `custom_jvp_call`, `custom_vjp_call`, the `while/body`, `while/cond` pair of loops and
#   scans, and the `cond/branch_N_fun` pair of conditionals.
_DROP = re.compile(r"^(p?jit|xla_computation|pmap|xla_pmap)(\(.*\))?$")
_UNWRAP = re.compile(r"^(transpose|jvp|vjp|linearize|vmap|remat|checkpoint|rematted_computation|shard_map|custom_jvp_call|custom_vjp_call|named_call)\((.*)\)$")
_INTERNAL = re.compile(r"^(closed_call|core_call|checkpoint|rematted_computation|remat\d*|custom_jvp_call|custom_vjp_call|branch_\d+_fun)$")
_PAIRS = {"while": re.compile(r"^(body|cond)$"), "cond": re.compile(r"^branch_\d+_fun$")}
_SUFFIX = re.compile(r"\.\d+$")

# HLO opcodes / custom-call targets that dominate a fusion's cost, by class.
_CONV_TARGET = re.compile(r"conv", re.IGNORECASE)
_GEMM_TARGET = re.compile(r"gemm|matmul|blas|dot", re.IGNORECASE)


def split_path(op_name: str) -> list[str]:
    """Split an op_name on '/' outside parentheses (wrappers may nest scope paths)."""
    parts, depth, cur = [], 0, []
    for ch in op_name:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        if ch == "/" and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p]


def _unwrap(component: str) -> tuple[str, bool]:
    """The scope inside transformation wrappers, and whether there was one."""
    wrapped = False
    for _ in range(32):  # wrappers nest: transpose(jvp(fc1))
        m = _UNWRAP.match(component)
        if not m:
            break
        component, wrapped = m.group(2), True
    return component, wrapped


def _user_scopes(parts: list[str]) -> list[str]:
    scopes: list[str] = []
    last_wrapped: str | None = None
    skip_next = False
    for i, comp in enumerate(parts):
        if skip_next:
            skip_next = False
            continue
        nxt = parts[i + 1] if i + 1 < len(parts) else ""
        if comp in _PAIRS and _PAIRS[comp].match(nxt):
            skip_next = True
            continue
        if _DROP.match(comp) or _INTERNAL.match(comp):
            continue
        inner, wrapped = _unwrap(comp)
        if wrapped:
            if inner == last_wrapped:
                continue  # transpose(jvp(blk))/jvp(blk): one scope
            last_wrapped = inner
            scopes.extend(c for c in split_path(inner) if not (_DROP.match(c) or _INTERNAL.match(c)))
        else:
            last_wrapped = None
            scopes.append(comp)
    return scopes


def scope_and_op(op_name: str) -> tuple[str, str]:
    """(module scope, framework op) of an op_name; ('', '') when it is not a jax op path.

    A name without '/' (XLA copies a parameter's name, e.g. ``x``, onto layout
    transposes it inserts) is not a path to an op, so it names neither.
    """
    parts = split_path(op_name)
    if len(parts) < 2:
        return NO_MODULE, ""
    scopes = _user_scopes(parts[:-1])
    op = parts[-1]
    k = kernel_index(scopes)  # every op inside a tagged custom kernel is that kernel, in the kernel's module
    if k is not None:
        scopes, op = scopes[:k], kernel_op(scopes[k])
    tagged = module_from_tags(scopes)  # porter's own capture: its tags name the module exactly
    return (tagged if tagged is not None else MODULE_SEP.join(scopes)), op


def strip_suffix(hlo_name: str) -> str:
    """``fusion.12`` -> ``fusion``: the HLO op's kind without its instance number."""
    return _SUFFIX.sub("", hlo_name)


@dataclass(frozen=True)
class HloOp:
    """One HLO instruction's attribution: where in the model it comes from and what it is."""

    module: str
    framework_op: str
    op_class: str
    opcode: str
    op_name: str
    flops: float = float("nan")  # profilers.hlo_cost, from the HloProto's shapes
    bytes: float = float("nan")
    input_shapes: str = ""  # JSON operand dims, as kineto's Input Dims
    dtypes: str = ""
    members: str = ""  # JSON [[module, op, share], ...] when a fusion spans modules (HloModuleIndex.members)
    call: str = ""  # '<op>#<k>': the op call porter tagged it with (porter.targets.call_tags), '' untagged
    call_members: str = ""  # JSON [[module, '<op>#<k>', share], ...] when a fusion holds several calls


@dataclass
class _Instr:
    opcode: str
    op_name: str
    target: str
    called: tuple[int, ...]
    dims: tuple[int, ...] = ()  # output dims (a tuple output: empty, elems summed)
    elems: int = 1
    operands: tuple[int, ...] = ()
    id: int = -1
    computation: int = -1  # the id of the computation holding it (ids may repeat across computations)
    parameter: int = -1  # a parameter's number in its computation


# Fused members that move no data of their own and do no arithmetic: left out of the split.
_FREE = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "iota", "broadcast"})


def member_cost(instr: _Instr, operands: list[_Instr]) -> float:
    """Estimated arithmetic of one fused instruction, from HLO shapes (an estimate).

    dot: 2 * output elements * K, K = sqrt(lhs * rhs / out) (exact for a plain matmul);
    convolution: 2 * output elements * (kernel elements / output features), output features
    being the largest output dim the kernel also has; reduce: its input elements; anything
    else: its output elements times the opcode's cost per element (porter.core.elementcost:
    an exponential or erf is not an add; a sort pays log2 of its length per element).
    """
    out = max(instr.elems, 1)
    if instr.opcode == "dot" and len(operands) >= 2:
        k = (max(operands[0].elems, 1) * max(operands[1].elems, 1) / out) ** 0.5
        return 2.0 * out * max(k, 1.0)
    if instr.opcode == "convolution" and len(operands) >= 2:
        common = set(instr.dims) & set(operands[1].dims)
        feat = max(common) if common else 1
        return 2.0 * out * max(operands[1].elems / feat, 1.0)
    if instr.opcode == "reduce" and operands:
        return float(max(operands[0].elems, 1))
    length = int(operands[0].dims[-1]) if operands and operands[0].dims else 0
    return float(out) * element_weight(instr.opcode, length)


@dataclass
class HloModuleIndex:
    name: str
    instrs: dict[str, _Instr] = field(default_factory=dict)
    computations: dict[int, list[_Instr]] = field(default_factory=dict)
    roots: dict[int, _Instr] = field(default_factory=dict)
    # (computation id, instruction id) -> the instructions of that computation reading it
    users: dict[tuple[int, int], list[_Instr]] = field(default_factory=dict)
    costs: HloCosts | None = None
    _callers: dict[int, _Instr] | None = field(default=None, repr=False)  # computation id -> its caller (caller())

    def heavy_class(self, instr: _Instr) -> str:
        """'conv' or 'matmul' when the instruction is, or fuses, a convolution or a dot."""
        seen: set[int] = set()
        todo = [instr]
        found = ""
        while todo:
            cur = todo.pop()
            if cur.opcode == "convolution" or (cur.opcode == "custom-call" and _CONV_TARGET.search(cur.target)):
                return "conv"
            if cur.opcode == "dot" or (cur.opcode == "custom-call" and _GEMM_TARGET.search(cur.target)):
                found = "matmul"
            for cid in cur.called:
                if cid not in seen and len(seen) < 10000:
                    seen.add(cid)
                    todo.extend(self.computations.get(cid, ()))
        return found

    def members(self, instr: _Instr) -> str:
        """A fusion's instructions by module (porter.core.schema.encode_members: '' unless they span
        two modules or more), each costed by member_cost; a member without a path to an op (XLA
        names a cumulative sum's inlined add ``reduce_window_sum``) is the fusion's. '' for any
        other instruction: a sort's comparator or a reduce's ``to_apply`` is its caller's work."""
        if instr.opcode != "fusion":
            return ""
        by_id = {i.id: i for c in instr.called for i in self.computations.get(c, ())}
        parent_scope = scope_and_op(self.op_name_of(instr))

        def entry(member: _Instr) -> tuple[str, str, float]:
            module, op = scope_and_op(member.op_name) if _is_path(member.op_name) else parent_scope
            return module, op or member.opcode, member_cost(member, [by_id[o] for o in member.operands if o in by_id])

        return encode_members(entry(m) for m in by_id.values() if m.opcode not in _FREE)

    def call_members(self, instr: _Instr) -> str:
        """A fusion's instructions by the op call porter tagged each with (porter.targets.call_tags;
        porter.core.schema.encode_call_members: '' unless two calls or more), each costed by
        member_cost; a member without op_name takes the fusion's. Every member, not only the
        root, so a GELU's elementwise chain fused with its dense layer's bias add shows both calls.
        '' for an instruction other than a fusion (members)."""
        if instr.opcode != "fusion":
            return ""
        by_id = {i.id: i for c in instr.called for i in self.computations.get(c, ())}
        parent = self.op_name_of(instr)

        def entry(member: _Instr) -> tuple[str, str, float]:
            name = member.op_name if _is_path(member.op_name) else parent
            call = call_from_tags(split_path(name)) if CALL_TAG in name else None
            cost = member_cost(member, [by_id[o] for o in member.operands if o in by_id])
            return (call[0], f"{call[1]}#{call[2]}", cost) if call else ("", "", cost)

        return encode_call_members(entry(m) for m in by_id.values() if m.opcode not in _FREE)

    def op_name_of(self, instr: _Instr, _depth: int = 0) -> str:
        """The instruction's op_name, else its fused root's (fusions may carry none), else the
        scope its readers share (readers_scope): XLA's own instructions (a layout transpose of a
        convolution's weights, a mask broadcast hoisted out of the layers that read it) carry
        no path to an op, and without one their time fell to the model's root (resnet_wide on
        XLA: ten weight transposes, 2.6 ms per step, read as a root group 29x eager's)."""
        own = instr.op_name if _is_path(instr.op_name) else ""
        caller = self.caller(instr.computation)
        if caller is not None and (not own or not scope_and_op(own)[0]):
            inherited = self.op_name_of(caller, _depth)
            if _is_path(inherited):  # its caller's module and op call, its own op
                op = split_path(own or instr.op_name)[-1:] or [instr.opcode]
                return "/".join([*split_path(inherited)[:-1], *op])
        for cid in () if own else instr.called:
            root = self.roots.get(cid)
            if root is not None and _is_path(root.op_name):
                own = root.op_name
                break
        if own or _depth >= READER_DEPTH:
            return own or instr.op_name
        return self.readers_scope(instr, _depth) or instr.op_name

    def caller(self, computation: int) -> _Instr | None:
        """The instruction that calls a computation (a sort's comparator, a reduce's or scatter's
        ``to_apply``, a while's body and condition, a conditional's branches, a call's callee, a
        fusion's body); None for the entry computation. XLA names the comparator's compares
        ``ne``, ``eq``, ``lt`` without a path: they are their caller's work, in its module."""
        if self._callers is None:
            self._callers = {cid: ins for instrs in self.computations.values() for ins in instrs for cid in ins.called}
        return self._callers.get(computation)

    def readers_scope(self, instr: _Instr, _depth: int = 0) -> str:
        """The innermost module scope that every reader of instr is in (their op_names' common
        leading components up to the last module tag), as an op_name ending in instr's own
        opcode; '' when no reader names a module. Readers without a scope of their own are
        followed to theirs (a get-tuple-element, a bitcast), READER_DEPTH deep, the first
        READER_FANOUT readers of each."""
        paths = [split_path(name)[:-1] for name in self._reader_names(instr, _depth)]
        paths = [p for p in paths if p]
        if not paths:
            return ""
        common: list[str] = []
        for parts in zip(*paths):
            if any(x != parts[0] for x in parts):
                break
            common.append(parts[0])
        tagged = [i for i, comp in enumerate(common) if comp.startswith(MODULE_TAG)]
        if not tagged:
            return ""
        opcode = self.roots[instr.called[0]].opcode if instr.called and instr.called[0] in self.roots else instr.opcode
        return "/".join([*common[:tagged[-1] + 1], opcode])

    def _reader_names(self, instr: _Instr, depth: int) -> list[str]:
        """The op_names of instr's readers; a fusion reading it is looked into, to the members
        that read that operand (a fusion's own name is its root's: one fusion may hold several
        modules' convolutions, named after the pooling at its end)."""
        names = []
        for u in self.users.get((instr.computation, instr.id), [])[:READER_FANOUT]:
            inner = []
            if u.opcode == "fusion" and len(u.called) == 1:
                slots = [i for i, o in enumerate(u.operands) if o == instr.id]
                params = [p for p in self.computations.get(u.called[0], ()) if p.opcode == "parameter" and p.parameter in slots]
                inner = [name for p in params for name in self._reader_names(p, depth + 1)]
            names.extend(inner or [self.op_name_of(u, depth + 1)])
        return names


READER_DEPTH = 4  # how far readers_scope follows readers that have no scope themselves
READER_FANOUT = 64  # readers looked at per instruction: a bound on the walk, whatever the program


def _is_path(op_name: str) -> bool:
    """A path to a jax op (scope_and_op): XLA copies a bare parameter name onto transposes it inserts."""
    return len(split_path(op_name)) >= 2


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _prod(dims: Iterable[int]) -> int:
    n = 1
    for d in dims:
        n *= int(d)
    return n


def index_module(hlo_proto: Any) -> HloModuleIndex:
    """Index an HloProto message (profilers.xspace_proto) by instruction name."""
    mod = hlo_proto.hlo_module
    idx = HloModuleIndex(name=_text(mod.name), costs=HloCosts(mod))
    for comp in mod.computations:
        instrs = []
        for ins in comp.instructions:
            dims = tuple(int(d) for d in ins.shape.dimensions)
            elems = (sum(_prod(t.dimensions) for t in ins.shape.tuple_shapes) if len(ins.shape.tuple_shapes)
                     else _prod(dims))
            info = _Instr(
                opcode=_text(ins.opcode),
                op_name=_text(ins.metadata.op_name),
                target=_text(ins.custom_call_target),
                called=tuple(ins.called_computation_ids),
                dims=dims, elems=elems, operands=tuple(ins.operand_ids), id=int(ins.id), computation=int(comp.id),
                parameter=int(ins.parameter_number) if _text(ins.opcode) == "parameter" else -1,
            )
            instrs.append(info)
            for operand in info.operands:
                idx.users.setdefault((info.computation, operand), []).append(info)
            idx.instrs.setdefault(_text(ins.name), info)
            if ins.id == comp.root_id:
                idx.roots[comp.id] = info
        idx.computations[comp.id] = instrs
    return idx


@dataclass
class HloIndex:
    """HLO modules of one trace, found by program id and by module name."""

    by_program: dict[int, HloModuleIndex] = field(default_factory=dict)
    by_name: dict[str, HloModuleIndex] = field(default_factory=dict)
    _cache: dict[tuple[int, str, str], HloOp] = field(default_factory=dict)

    def add(self, program_id: int | None, module: HloModuleIndex) -> None:
        if program_id is not None:
            self.by_program[program_id] = module
        self.by_name.setdefault(module.name, module)

    def module_for(self, program_id: int | None, module_name: str) -> HloModuleIndex | None:
        if program_id is not None and program_id in self.by_program:
            return self.by_program[program_id]
        return self.by_name.get(module_name)

    def lookup(self, program_id: int | None, module_name: str, hlo_op: str,
               kernel_names: Iterable[str] = ()) -> HloOp:
        """Attribution of one HLO op; falls back to the op's own name when unknown."""
        key = (program_id if program_id is not None else -1, module_name, hlo_op)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        mod = self.module_for(program_id, module_name)
        instr = mod.instrs.get(hlo_op) if mod else None
        op_name = mod.op_name_of(instr) if (mod and instr) else ""
        module, framework_op = scope_and_op(op_name)
        opcode = instr.opcode if instr else ""
        fallback = framework_op or strip_suffix(hlo_op)
        hints = [hlo_op, opcode, *kernel_names]
        cls = classify(fallback, [h for h in hints if h])
        heavy = mod.heavy_class(instr) if (mod and instr) else ""
        if heavy and cls not in ("conv", "matmul", "attention"):
            cls = heavy
        cost = mod.costs.cost(hlo_op) if (mod and mod.costs) else None
        extra = {}
        if cost is not None:
            flops, nbytes, dims, dtypes = cost
            extra = dict(flops=flops, bytes=nbytes, input_shapes=json.dumps(dims), dtypes=json.dumps(dtypes))
        call = call_from_tags(split_path(op_name)) if CALL_TAG in op_name else None
        hit = HloOp(module=module, framework_op=fallback, op_class=cls, opcode=opcode, op_name=op_name,
                    members=mod.members(instr) if (mod and instr) else "",
                    call=f"{call[1]}#{call[2]}" if call else "",
                    call_members=mod.call_members(instr) if (mod and instr) else "", **extra)
        self._cache[key] = hit
        return hit
