"""tune.json, the winning settings as a snippet to paste (tuned-settings.txt), and a
`porter bench` suite with the untuned and the tuned target (tuned-bench.toml). Each file is
written to a temporary name and renamed (porter.core.atomic)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from porter.core.atomic import atomic_write_text

FORMAT = "porter-tune/1"


def document(plan: Any, tuner: Any, candidates: list[dict[str, Any]], best: dict[str, Any] | None, status: str,
             opts: Any, search: str) -> dict[str, Any]:
    """tune.json's document; search: how the best combination was sought (porter.tune.run.GREEDY)."""
    import porter

    return {
        "format": FORMAT, "porter_version": porter.__version__, "status": status,
        "model": plan.model, "source": plan.source, "target": plan.target, "stack": plan.stack,
        "from_diagnosis": plan.from_diagnosis or None, "budget_s": opts.budget_s,
        "elapsed_s": round(tuner.opts.budget_s - tuner.left_s(), 1),
        "tolerance": tuner.tolerance, "untuned_accuracy": tuner.untuned_accuracy,
        "policy": tuner.policy.finished().to_dict(),
        "versions": {**tuner.source.stack.versions(), **tuner.untuned.stack.versions()},
        "candidates": candidates,
        "not_runnable_here": [{"fix_id": r.fix_id, "recipe": r.name, "stack": r.stack, "why": r.runnable_here}
                              for r in plan.not_here],
        "findings": list(tuner.findings),
        "search": search,
        "best": None if best is None else {
            "recipes": best["recipes"], "settings": best["settings"], "measured": best["measured"],
            "recovered_us": best["recovered_us"], "accuracy": best["accuracy"]},
    }


def snippet(settings: dict[str, Any], target: str) -> str:
    """The settings as lines a user pastes into their own run."""
    lines = [f"# porter tune: the kept settings for {target}"]
    if settings.get("channels_last"):
        lines += ["model = model.to(memory_format=torch.channels_last)",
                  "x = x.contiguous(memory_format=torch.channels_last)  # each 4-d input"]
    if settings.get("dtype"):
        lines.append(f"model = model.to(torch.{ {'bf16': 'bfloat16', 'fp16': 'float16'}[settings['dtype']]})  # and floating inputs")
    if settings.get("matmul_precision"):
        lines.append(f"torch.set_float32_matmul_precision({settings['matmul_precision']!r})")
    if settings.get("compile_mode") or settings.get("inductor"):
        args = [f"mode={settings['compile_mode']!r}"] if settings.get("compile_mode") else []
        args += [f"options={settings['inductor']!r}"] if settings.get("inductor") else []
        lines.append(f"model = torch.compile(model, {', '.join(args)})")
    if settings.get("autocast"):
        dt = {"bf16": "bfloat16", "fp16": "float16"}[settings["autocast"]]
        lines.append(f"with torch.autocast('cpu', dtype=torch.{dt}):  # around each forward")
    if settings.get("sdpa_backends"):
        names = ", ".join(f"SDPBackend.{n.upper()}" if n == "math" else f"SDPBackend.{n.upper()}_ATTENTION"
                          for n in settings["sdpa_backends"])
        lines.append(f"with torch.nn.attention.sdpa_kernel([{names}]):  # around each forward")
    if settings.get("xla_options"):
        flags = " ".join(f"--{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in settings["xla_options"].items())
        lines += [f"export XLA_FLAGS=\"$XLA_FLAGS {flags}\"  # the whole process",
                  f"# or one program: jax.jit(f).lower(*args).compile(compiler_options={settings['xla_options']!r})"]
    if settings.get("jax_precision"):
        lines.append(f"jax.config.update('jax_default_matmul_precision', {settings['jax_precision']!r})")
    if settings.get("ort"):
        ort = settings["ort"]
        if ort.get("graph_optimization_level"):
            lines.append(f"so.graph_optimization_level = ort.GraphOptimizationLevel.{ort['graph_optimization_level']}")
        lines += [f"so.add_session_config_entry({k!r}, {str(v)!r})" for k, v in (ort.get("config") or {}).items()]
    lines += [f"export {k}={v}" for k, v in (settings.get("env") or {}).items()]
    return "\n".join(lines) + "\n"


def bench_suite(doc: dict[str, Any]) -> str:
    """A SUITE.toml whose case runs the source, the untuned and the tuned target, so that
    `porter bench tuned-bench.toml` keeps tracking the recovery (porter/bench/suite.py `tuned`)."""
    best = doc["best"]
    name = f"{Path(doc['model']).stem}-tuned"
    recipes = ", ".join(json.dumps(r) for r in best["recipes"])
    return (f"# porter tune {doc['model']} --from {doc['source']} --to {doc['target']}: measured x{best['measured']['ratio']:.3f} "
            f"[{best['measured']['ci95'][0]:.3f}, {best['measured']['ci95'][1]:.3f}] of the source\n"
            f"[suite]\nname = {json.dumps(name)}\n\n[[case]]\nname = {json.dumps(name)}\nmodel = {json.dumps(doc['model'])}\n"
            f"stacks = [{json.dumps(doc['source'])}, {json.dumps(doc['target'])}]\n\n"
            f"[case.tuned]\n{json.dumps(doc['target'])} = [{recipes}]\n")


def write_outputs(out_dir: Path, doc: dict[str, Any]) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [atomic_write_text(out_dir / "tune.json", json.dumps(doc, indent=1, default=str))]
    if doc.get("best"):
        written.append(atomic_write_text(out_dir / "tuned-settings.txt", snippet(doc["best"]["settings"], doc["target"])))
        written.append(atomic_write_text(out_dir / "tuned-bench.toml", bench_suite(doc)))
    return written


__all__ = ["FORMAT", "bench_suite", "document", "snippet", "write_outputs"]
