"""The torch model exported to ONNX (torch.onnx.export, dynamo) and run by ONNX Runtime.

Module paths: the dynamo exporter writes each node's module chain into its ``namespace``
metadata; profilers.onnxruntime.node_scopes_from_onnx turns that into node -> module, and
we write it beside the profile as ``<profile>.nodes.json`` for the reader. Paths are
normalised to the torch stacks' convention (qualified name, '.' -> '/'). Each node also
carries the op call it came from (porter.targets.onnx_calls, from the exported program's FX
graph), and a node ORT fused from several lists their calls (``call_members``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import torch

from porter.runtime.timing import timed_call
from porter.core.errors import PorterError
from porter.core.elementcost import element_weight
from porter.core.schema import encode_call_members, encode_members
from porter.targets.base import Activations, Availability, CaptureFailure, Prepared, Stack, module_path
from porter.targets.outputs import leaf_outputs

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "rocm": "ROCMExecutionProvider"}
PROFILE_WARMUP_RUNS = 1  # inside the profiled session: its first run pays for arena allocation
_NCHWC = re.compile(r"_nchwc$")


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """The exporter logs a warning per optional op library it lacks (torchvision); hide them."""
    logger = logging.getLogger("torch.onnx")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def export_failure(model_name: str, exc: BaseException) -> CaptureFailure:
    """An export error as one line, naming the aten op and module when the message does."""
    from porter.targets.failure import (HINTS, NO_LOWERING, categorize, chain_text, exception_chain,
                                        module_from_fx_frames, op_from_message)

    inner = exception_chain(exc)[-1]  # the exporter wraps the converter's own error
    text = str(exc)
    mod = re.search(r"(?:module|nn_module_stack)[^'\"]*['\"]([A-Za-z_][\w.]*)['\"]", text)
    where = module_path(mod.group(1)) if mod else module_from_fx_frames(exc)
    first = next((line.strip() for line in str(inner).splitlines() if line.strip()), type(inner).__name__)
    name = op_from_message(chain_text(exc))
    op = bool(name)
    category = categorize(exc, name)
    failure = CaptureFailure(
        f"torch.onnx.export failed for model {model_name}"
        + (f" at op {name}" if op else "")
        + (f" in module {where}" if where else "")
        + f": {category}: {type(inner).__name__}: {first[:200]}",
        op=name,
        module=where,
        hint=HINTS.get(category, HINTS[NO_LOWERING]) + " (see torch.onnx's supported ops)",
    )
    failure.category = category
    return failure


def module_of_nodes(onnx_path: Path, graph_module: Any = None) -> dict[str, dict[str, str]]:
    """node name -> {module, framework_op, call, ...}, module in the torch stacks' path
    convention; with the exported program's FX graph, calls named from it and folded
    Conv+BatchNorm nodes given back to their convolution (porter.targets.onnx_calls)."""
    import onnx

    from porter.targets.onnx_calls import annotate, fx_calls
    from profilers.onnxruntime import node_scopes_from_onnx

    proto = onnx.load(str(onnx_path), load_external_data=False)
    scopes = {name: {**entry, "module": module_path(entry.get("module", ""))}
              for name, entry in node_scopes_from_onnx(proto).items()}
    return annotate(proto, scopes, fx_calls(graph_module)) if graph_module is not None else scopes


def scopes_of_optimized(original: Any, optimized: Any, nodes: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """Extend node -> scope to the nodes of ORT's optimized graph (the names its profile uses).

    Fusion renames nodes (``node_MatMul_6/MatMulAddFusion``, ``SkipLayerNormalization``) and
    inserts helpers (``gemm_input_reshape_token_3``); the CPU provider's NCHWc layout pass
    names nodes after the value they replace (``relu_nchwc``). An optimized node takes the
    scope of the original node that produced the same output value, else of the original
    node (or value) its name starts with, else of the one node it feeds when that has one
    (a Gemm's input reshape), else of the producer of its first input that has one.
    A fused node that replaced original nodes of several modules also lists them
    (``members``, fused_members; it is then named after its costliest member) and their op
    calls (``call_members``, fused_calls) so the analysis can split its time.
    """
    producer = {out: n.name for n in original.node for out in n.output}
    dims = _dims(original)
    # the original value each optimized node computes: its own output names, or the value an
    # NCHWc node is named after ('relu_1_nchwc' computes 'relu_1')
    computes = {n.name: [v for v in n.output if v in producer] or [_NCHWC.sub("", n.name.split("/")[0])]
                for n in optimized.node}
    materialized = {v for vals in computes.values() for v in vals}
    scope_of_value: dict[str, dict[str, str]] = {v: nodes[n] for v, n in producer.items() if n in nodes}
    out = dict(nodes)
    users: dict[str, list[Any]] = {}
    for n in optimized.node:
        for v in n.input:
            users.setdefault(v, []).append(n)

    def own(node: Any) -> dict[str, str] | None:
        """The node's scope by its output value or its name."""
        if node.name in nodes:
            return nodes[node.name]
        found = next((scope_of_value[v] for v in node.output if v in scope_of_value), None)
        if found is None:  # fused: "<original node>/<Fusion>"; NCHWc layout: "<original value>_nchwc"
            stem = node.name.split("/")[0]
            found = nodes.get(stem) or scope_of_value.get(_NCHWC.sub("", stem))
        return found

    for node in optimized.node:
        if node.name in out:
            continue
        found = own(node)
        if found is None:  # a helper feeding one node (a Gemm's input reshape) is that node's work
            feeds = [u for v in node.output for u in users.get(v, [])]
            found = own(feeds[0]) if len(feeds) == 1 else None
        if found is None:
            found = next((scope_of_value[v] for v in node.input if v in scope_of_value), None)
        if found is not None:
            replaced = replaced_nodes(computes[node.name], materialized - set(computes[node.name]), original)
            members, calls = fused_members(replaced, nodes, dims), fused_calls(replaced, nodes, dims)
            top = json.loads(members)[0][1] if members else ""  # named after its costliest member (a Conv, not its ReLU)
            out[node.name] = {**found, **({"members": members, "framework_op": top} if members else {}),
                              **({"call_members": calls} if calls else {})}
            for v in node.output:
                scope_of_value.setdefault(v, found)
    return out


MAX_MEMBERS = 32  # a walk past this many original nodes did not find the fused node's inputs


def _dims(graph: Any) -> dict[str, tuple[int, ...]]:
    """value name -> its static dims (value_info, inputs, outputs, initializers); unknown dims as 1."""
    out: dict[str, tuple[int, ...]] = {t.name: tuple(t.dims) for t in graph.initializer}
    for v in (*graph.value_info, *graph.input, *graph.output):
        dims = v.type.tensor_type.shape.dim
        out.setdefault(v.name, tuple(int(d.dim_value) or 1 for d in dims))
    return out


def node_cost(node: Any, dims: dict[str, tuple[int, ...]]) -> float:
    """Estimated arithmetic of one ONNX node (an estimate): Conv 2 * output * (weight / output
    channels), MatMul/Gemm 2 * output * K, anything else its output elements times the op's
    cost per element (porter.core.elementcost)."""
    out = max(math.prod(dims.get(node.output[0], (1,))) if node.output else 1, 1)
    if node.op_type in ("Conv", "ConvTranspose") and len(node.input) > 1 and dims.get(node.input[1]):
        w = dims[node.input[1]]
        return 2.0 * out * max(math.prod(w) // max(w[0], 1), 1)
    if node.op_type in ("MatMul", "Gemm") and dims.get(node.input[0]):
        return 2.0 * out * max(dims[node.input[0]][-1], 1)
    first = dims.get(node.input[0], ()) if node.input else ()
    return float(out) * element_weight(node.op_type, int(first[-1]) if first else 0)


def replaced_nodes(outputs: list[str], boundary: set[str], original: Any) -> dict[str, Any]:
    """The original nodes an optimized (fused) node replaced, by name; {} when unknown.

    Walks back through the original graph from the values the fused node computes (outputs,
    original names) to values some other node of the optimized graph computes (boundary).
    """
    producer = {out: n for n in original.node for out in n.output}
    todo = [producer[v] for v in outputs if v in producer]
    seen: dict[str, Any] = {}
    while todo:
        n = todo.pop()
        if n.name in seen:
            continue
        seen[n.name] = n
        if len(seen) > MAX_MEMBERS:
            return {}
        todo.extend(producer[i] for i in n.input if i and i not in boundary and i in producer)
    return seen


def _parts(replaced: dict[str, Any], nodes: dict[str, dict[str, str]], dims: dict[str, tuple[int, ...]],
           key: str, label: str) -> list[tuple[str, str, float]]:
    """(module, label, estimated cost) of each replaced original node; a node the exporter
    already folded (its scope's own ``key`` list: a Conv holding its BatchNorm,
    porter.targets.onnx_calls) is its parts, its cost shared by their shares."""
    out = []
    for name, n in replaced.items():
        scope, cost = nodes.get(name, {}), node_cost(n, dims)
        inner = json.loads(scope[key]) if scope.get(key) else []
        if inner:
            out.extend((m, lab, cost * share) for m, lab, share in inner)
        else:
            out.append((scope.get("module", ""), scope.get(label, "") or (n.op_type if label == "framework_op" else ""), cost))
    return out


def fused_members(replaced: dict[str, Any], nodes: dict[str, dict[str, str]], dims: dict[str, tuple[int, ...]]) -> str:
    """The replaced original nodes by module with their share of the estimated cost, as JSON
    [[module, op, share], ...] (porter.core.schema.encode_members); '' within one module or unknown."""
    return encode_members(_parts(replaced, nodes, dims, "members", "framework_op"))


def fused_calls(replaced: dict[str, Any], nodes: dict[str, dict[str, str]], dims: dict[str, tuple[int, ...]]) -> str:
    """The replaced original nodes by the op call each came from (a Conv, its BatchNorm and its
    ReLU folded into one node are three calls), with their share of the estimated cost, as
    JSON [[module, '<op>#<k>', share], ...] (porter.core.schema.encode_call_members); '' for one call."""
    return encode_call_members(_parts(replaced, nodes, dims, "call_members", "call"))


def module_outputs(graph: Any, node_modules: dict[str, str]) -> dict[str, str]:
    """module path -> the ONNX value that is its output.

    A module's output is the last value (in node order) produced inside its subtree and
    used outside it or returned by the graph.
    """
    producer_mods: dict[str, str] = {}
    for node in graph.node:
        for out in node.output:
            producer_mods[out] = node_modules.get(node.name, "")
    consumers: dict[str, list[str]] = {}
    for node in graph.node:
        for inp in node.input:
            consumers.setdefault(inp, []).append(node_modules.get(node.name, ""))
    graph_outputs = {o.name for o in graph.output}

    def inside(mod: str, path: str) -> bool:
        return mod == path or mod.startswith(path + "/")

    paths = sorted({p for m in node_modules.values() if m for p in _prefixes(m)})
    result: dict[str, str] = {}
    for node in graph.node:  # later nodes overwrite earlier ones: the last value wins
        mod = node_modules.get(node.name, "")
        for path in (p for p in paths if mod and inside(mod, p)):
            for out in node.output:
                used_outside = out in graph_outputs or any(not inside(c, path) for c in consumers.get(out, []))
                if used_outside:
                    result[path] = out
    return result


def _prefixes(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


class OrtStack(Stack):
    name = "ort"
    devices = ("cpu", "cuda", "rocm")
    trace_format = "onnxruntime"
    module_attribution = "compiler"  # from the exporter's node metadata, not hooks
    # Exporting each submodule by itself takes ~8 s on two cores (dynamo export + session).
    no_module_runs = "exporting every submodule to ONNX separately takes seconds per module; local error is not measured"
    no_op_runs = "ONNX Runtime runs exported graphs, not single aten ops; op-level replay is not offered"
    dtypes = ("fp32",)
    autocast_note = "the ONNX export of an autocast forward is not a graph porter runs"
    dtype_note = "porter exports the model as it is given and runs it on ORT's execution providers, which lack half-precision kernels for many ops"

    def availability_impl(self, device: str) -> Availability:
        for pkg in ("onnxruntime", "onnxscript", "onnx"):
            try:
                __import__(pkg)
            except ImportError as exc:
                return Availability(False, f"{pkg} is not importable ({exc})", "pip install 'porter[ort]'")
        import onnxruntime as ort

        have = ort.get_available_providers()
        if PROVIDERS[device] not in have:
            return Availability(
                False,
                f"onnxruntime {ort.__version__} has no {PROVIDERS[device]} (it has {', '.join(have)})",
                f"install an onnxruntime build with {PROVIDERS[device]}, or capture on such a host and pass the bundle",
            )
        return Availability(True)

    @staticmethod
    def _options() -> Any:
        """Session options; intra-op threads as many as torch's, so porter's thread policy
        (porter/runtime/threads.py: one per side on a live pair) holds for ORT too. ORT's own
        default is a pool per physical core whose threads spin, which a CPU-time headline
        would count for every thread."""
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        opts.intra_op_num_threads = torch.get_num_threads()
        return opts

    def _session(self, prepared: Prepared, profile_prefix: Path | None = None, optimized: Path | None = None):
        import onnxruntime as ort

        opts = self._options()
        tuned = prepared.handle.get("tuned") or {}
        if tuned.get("graph_optimization_level"):
            opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, tuned["graph_optimization_level"])
        for key, value in (tuned.get("config") or {}).items():
            opts.add_session_config_entry(str(key), str(value))
        if profile_prefix is not None:
            opts.enable_profiling = True
            opts.profile_file_prefix = str(profile_prefix)
        if optimized is not None:  # serialise the graph ORT runs: its node names are the profile's
            opts.optimized_model_filepath = str(optimized)
        return ort.InferenceSession(str(prepared.handle["onnx"]), opts, providers=[PROVIDERS[prepared.device]])

    tuned_keys = ("ort",)

    def prepare_impl(self, model: Any, device: str) -> Prepared:
        return self.prepare_tuned_impl(model, device, {})

    def prepare_tuned_impl(self, model: Any, device: str, settings: dict[str, Any]) -> Prepared:
        """settings["ort"]: graph_optimization_level and session config entries for this session."""
        import onnxruntime as ort

        workdir = Path(tempfile.mkdtemp(prefix="porter-ort-"))
        onnx_path = workdir / f"{model.name}.onnx"
        t0 = time.perf_counter()
        try:
            with _quiet_exporter(), torch.no_grad(), leaf_outputs(model.module.eval()) as module:
                program = torch.onnx.export(module, model.example_inputs, dynamo=True, verbose=False)
            program.save(str(onnx_path))
        except Exception as exc:
            raise export_failure(model.name, exc) from None
        export_s = time.perf_counter() - t0
        graph = getattr(getattr(program, "exported_program", None), "graph_module", None)
        nodes = module_of_nodes(onnx_path, graph)
        prepared = Prepared(self.name, device, model, call=lambda *a: a, inputs=(),
                            handle={"onnx": onnx_path, "nodes": nodes, "tuned": dict(settings.get("ort") or {})})
        sess = self._session(prepared)
        names = [i.name for i in sess.get_inputs()]
        tensors = [x for x in model.example_inputs if isinstance(x, torch.Tensor)]
        prepared.inputs = tuple(t.detach().cpu().numpy() for t in tensors)
        prepared.handle.update(session=sess, input_names=names)
        prepared.call = lambda *a: sess.run(None, dict(zip(names, a)))
        prepared.info.update(export_s=export_s, onnx_nodes=len(nodes), provider=PROVIDERS[device],
                             onnxruntime=ort.__version__)
        return prepared

    def sync_impl(self, prepared: Prepared, out: Any) -> None:
        """sess.run returns host numpy arrays: it has finished when it returns."""

    def to_torch_cpu_impl(self, out: Any) -> Any:
        return [torch.from_numpy(a.copy()) for a in out]

    def profile_impl(self, prepared: Prepared, steps: int, raw_dir: Path) -> Path:
        import onnx

        from profilers.onnxruntime import write_warmup_runs

        opt_path = Path(prepared.handle["onnx"]).with_suffix(".optimized.onnx")
        sess = self._session(prepared, profile_prefix=raw_dir / "ort", optimized=opt_path)
        feed = dict(zip(prepared.handle["input_names"], prepared.inputs))
        for _ in range(PROFILE_WARMUP_RUNS):
            sess.run(None, feed)
        step_s, cpu_s = [], []
        for _ in range(steps):
            wall, cpu = timed_call(lambda: sess.run(None, feed))
            step_s.append(wall)
            cpu_s.append(cpu)
        written = Path(sess.end_profiling())
        dest = raw_dir / f"{prepared.model.name}.ort.json"
        written.replace(dest)
        nodes_path = Path(str(dest) + ".nodes.json")
        original = onnx.load(str(prepared.handle["onnx"]), load_external_data=False).graph
        nodes = scopes_of_optimized(original, onnx.load(str(opt_path), load_external_data=False).graph,
                                    prepared.handle["nodes"])
        nodes_path.write_text(json.dumps(nodes, indent=1, sort_keys=True) + "\n")
        write_warmup_runs(dest, PROFILE_WARMUP_RUNS)  # the reader leaves them out of the steps
        prepared.info.update(profiled_step_s=step_s, profiled_step_cpu_s=cpu_s, profile_warmup_runs=PROFILE_WARMUP_RUNS)
        return dest

    def module_activations_impl(self, prepared: Prepared, full_modules: tuple[str, ...]) -> Activations:
        """Each module's output value added as a graph output, from one extra session run, and
        sketched (porter.targets.sketch). ORT returns all requested outputs of a run at once;
        they are sketched and dropped one by one. Module inputs are not graph values here, so
        full calls (--modules) are refused with a one-line error."""
        import onnx
        import onnxruntime as ort

        from porter.targets.sketch import torch_sketch

        if full_modules:
            raise PorterError("ort cannot save full module calls (--modules): module inputs are not graph values here",
                              hint="capture the suspects' full calls on the eager, inductor or xla stack")
        acts = Activations(source="module output values exposed as ONNX graph outputs (ORT numerics)")
        proto = onnx.load(str(prepared.handle["onnx"]))
        node_modules = {k: v["module"] for k, v in prepared.handle["nodes"].items()}
        called = {module_path(n) for n, m in prepared.model.module.named_modules()
                  if n and not isinstance(m, (torch.nn.ModuleList, torch.nn.ModuleDict))}  # containers never run
        wanted = {p: v for p, v in module_outputs(proto.graph, node_modules).items() if p in called}
        have = {o.name for o in proto.graph.output}
        for value in sorted(set(wanted.values()) - have):
            proto.graph.output.append(onnx.ValueInfoProto(name=value))
        opts = self._options()
        try:
            sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=[PROVIDERS[prepared.device]])
        except Exception as exc:
            raise PorterError(f"onnxruntime rejected the model with module outputs exposed: {exc}") from None
        names = [o.name for o in sess.get_outputs()]
        values = dict(zip(names, sess.run(names, dict(zip(prepared.handle["input_names"], prepared.inputs)))))
        for path in sorted(wanted):
            arr = values.get(wanted[path])
            if arr is None or arr.dtype.kind != "f":
                acts.not_recorded[path] = "its output is not a floating-point graph value"
                continue
            acts.summaries[path], acts.samples[path] = torch_sketch(torch.from_numpy(arr))
        for name, mod in prepared.model.module.named_modules():
            path = module_path(name)
            if name and path not in acts.summaries and path not in acts.not_recorded:
                acts.not_recorded[path] = ("a container (ModuleList/ModuleDict) that is never called" if path not in called
                                           else "the exporter left no graph value that is this module's output")
        return acts

    def versions_impl(self) -> dict[str, str]:
        import onnx
        import onnxruntime
        import onnxscript

        return {"onnxruntime": onnxruntime.__version__, "onnx": onnx.__version__, "onnxscript": onnxscript.__version__}


STACK = OrtStack()
