"""Fix recipes: what `porter tune` can set by itself to try a catalogue fix on one stack.

A catalogue entry may carry `[[fix.apply.<stack>]]` tables (docs/fixes.md), one per recipe:
a name (what `--try` takes), what it changes, whether it can change numerics, and settings
from the vocabulary below. Checked here as data, torch-free, so a catalogue with a recipe
for a GPU or a TPU is validated on any machine; porter.tune applies the ones that run here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

TORCH_STACKS = ("torch-cpu", "cuda", "rocm", "mtia", "inductor-cpp", "inductor-triton")
INDUCTOR = ("inductor-cpp", "inductor-triton")
XLA = ("xla-cpu", "xla-gpu", "xla-tpu")
# what runs in this process on a CPU-only machine; the rest are data until such a device is lent
RUNNABLE_HERE = ("torch-cpu", "inductor-cpp", "xla-cpu", "ort")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
MATMUL_PRECISIONS = ("highest", "high", "medium")
SDPA_BACKENDS = ("math", "flash", "efficient", "cudnn")
JAX_PRECISIONS = ("default", "high", "highest", "bfloat16", "tensorfloat32", "float32")
ORT_LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")
PORT_DTYPES = ("bf16", "fp16")
NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")

# setting -> (types, the stacks it applies to, what it is)
SETTINGS: dict[str, tuple[tuple[type, ...], tuple[str, ...], str]] = {
    "compile_mode": ((str,), INDUCTOR, f"torch.compile mode, one of {COMPILE_MODES}"),
    "inductor": ((dict,), INDUCTOR, "torch._inductor.config options passed as torch.compile(options=...)"),
    "matmul_precision": ((str,), TORCH_STACKS, f"torch.set_float32_matmul_precision, one of {MATMUL_PRECISIONS}"),
    "sdpa_backends": ((list,), TORCH_STACKS, f"torch.nn.attention.sdpa_kernel backends, of {SDPA_BACKENDS}"),
    "channels_last": ((bool,), TORCH_STACKS, "the model and its 4-d inputs in torch.channels_last"),
    "torch_backends": ((dict,), ("cuda", "rocm", "inductor-triton"),
                       "torch.backends flags, e.g. 'cudnn.benchmark' = true, 'cuda.matmul.allow_tf32' = true"),
    "xla_options": ((dict,), XLA, "XLA debug options for this compile (jit(...).lower(...).compile(compiler_options))"),
    "jax_precision": ((str,), XLA, f"jax.default_matmul_precision while tracing, one of {JAX_PRECISIONS}"),
    "ort": ((dict,), ("ort",), "ONNX Runtime session options: graph_optimization_level and config entries"),
    "env": ((dict,), tuple(), "environment variables the stack reads when it starts (needs a fresh process)"),
    "dtype": ((str,), TORCH_STACKS + XLA, f"a precision port: the model cast (--dtype), one of {PORT_DTYPES}"),
    "autocast": ((str,), TORCH_STACKS, f"a precision port: the forward under torch.autocast (--autocast), one of {PORT_DTYPES}"),
}
CHOICES: dict[str, tuple[str, ...]] = {"compile_mode": COMPILE_MODES, "matmul_precision": MATMUL_PRECISIONS,
                                       "jax_precision": JAX_PRECISIONS, "dtype": PORT_DTYPES, "autocast": PORT_DTYPES}


@dataclass(frozen=True)
class Recipe:
    """One way porter applies a fix on one stack."""

    name: str
    fix_id: str
    stack: str  # a porter.core.stacks.CATALOGUE_STACKS key
    changes: str  # what it changes, in a sentence
    numerics: bool  # whether it can change the model's numbers (then accuracy decides)
    settings: Mapping[str, Any] = field(default_factory=dict)

    @property
    def runnable_here(self) -> str:
        """'' when porter can apply it in this process on this machine's CPU, else why not."""
        if self.stack not in RUNNABLE_HERE:
            return f"a {self.stack} recipe: runs only where that device is lent"
        if "env" in self.settings or "torch_backends" in self.settings:
            return "sets process-wide state the untuned side shares; needs a fresh process per side"
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "fix_id": self.fix_id, "stack": self.stack, "changes": self.changes,
                "numerics": self.numerics, "settings": dict(self.settings)}


def parse_recipes(raw: Any, fix_id: str, stacks: Mapping[str, str], bad: Callable[[str], Exception]) -> dict[str, tuple[Recipe, ...]]:
    """A fix's `apply` table (stack -> list of recipe tables), checked; bad(msg) makes the error."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise bad(f"fix {fix_id!r}: apply must be a table of [[fix.apply.<stack>]] lists")
    out: dict[str, tuple[Recipe, ...]] = {}
    for stack, rows in raw.items():
        if stack not in stacks:
            raise bad(f"fix {fix_id!r}: apply names unknown stack {stack!r} (stacks: {', '.join(stacks)})")
        if isinstance(rows, dict):
            rows = [rows]
        if not isinstance(rows, list) or not rows:
            raise bad(f"fix {fix_id!r}: apply.{stack} must be one or more recipe tables")
        out[stack] = tuple(_recipe(row, fix_id, stack, bad) for row in rows)
    return out


def _recipe(row: Any, fix_id: str, stack: str, bad: Callable[[str], Exception]) -> Recipe:
    where = f"fix {fix_id!r} recipe apply.{stack}"
    if not isinstance(row, dict):
        raise bad(f"{where}: each recipe is a table")
    name = row.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise bad(f"{where}: name must be lower-case words joined by '-'")
    where = f"{where} {name!r}"
    if not isinstance(row.get("changes"), str) or not row["changes"]:
        raise bad(f"{where}: 'changes' must say what the recipe changes")
    if not isinstance(row.get("numerics"), bool):
        raise bad(f"{where}: 'numerics' must be true or false (can it change the model's numbers?)")
    settings = {k: v for k, v in row.items() if k not in ("name", "changes", "numerics")}
    if not settings:
        raise bad(f"{where}: no settings (known: {', '.join(SETTINGS)})")
    for key, value in settings.items():
        if key not in SETTINGS:
            raise bad(f"{where}: unknown setting {key!r} (known: {', '.join(SETTINGS)})")
        types, where_ok, what = SETTINGS[key]
        if not isinstance(value, types) or (bool in types) != isinstance(value, bool):
            raise bad(f"{where}: {key!r} has the wrong type ({what})")
        if where_ok and stack not in where_ok:
            raise bad(f"{where}: {key!r} does not apply to {stack} (only {', '.join(where_ok)})")
        if key in CHOICES and value not in CHOICES[key]:
            raise bad(f"{where}: {key!r} must be one of {CHOICES[key]}, not {value!r}")
    if any(b not in SDPA_BACKENDS for b in settings.get("sdpa_backends", [])):
        raise bad(f"{where}: sdpa_backends must be of {SDPA_BACKENDS}")
    if "dtype" in settings and "autocast" in settings:
        raise bad(f"{where}: dtype and autocast are two ways to lower precision; give one")
    level = settings.get("ort", {}).get("graph_optimization_level")
    if level is not None and level not in ORT_LEVELS:
        raise bad(f"{where}: ort.graph_optimization_level must be one of {ORT_LEVELS}")
    return Recipe(name, fix_id, stack, row["changes"], row["numerics"], settings)


def combine(recipes: tuple[Recipe, ...]) -> dict[str, Any] | None:
    """The settings of several recipes together, or None when two set one thing differently
    (two compile modes, a cast and an autocast): such a combination is not tried."""
    merged: dict[str, Any] = {}
    for r in recipes:
        for key, value in r.settings.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                clash = {k for k in value if k in merged[key] and merged[key][k] != value[k]}
                if clash:
                    return None
                merged[key] = {**merged[key], **value}
            elif key in merged and merged[key] != value:
                return None
            else:
                merged[key] = value
    if "dtype" in merged and "autocast" in merged:
        return None
    return merged


__all__ = ["RUNNABLE_HERE", "SETTINGS", "Recipe", "combine", "parse_recipes"]
