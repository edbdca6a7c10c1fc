"""diagnosis.json: the payload of a Diagnosis, and the one place that writes it.

Written once per diagnosis, after the reports: they render from the payload in memory, so
the render time is in `seconds` without writing the file twice. Every write is a temp file
plus rename (porter.core.atomic): a reader sees the old file or the new one.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import orjson
import pandas as pd

from porter import __version__
from porter.analysis.align import Alignment
from porter.core.samples import Samples
from porter.bundles.bundle import Bundle
from porter.core.atomic import atomic_write_bytes
from porter.pipeline.result import Diagnosis, model_fingerprint

DIAGNOSIS = "diagnosis.json"
FORMAT = "porter.diagnosis/1"
JSON_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE
CHUNK = 4096  # group rows encoded at a time (_array)


def _json_default(value: Any) -> Any:
    """What orjson cannot encode itself: other numpy scalars (via .item()), pandas NA."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    if value is pd.NA or value is pd.NaT:
        return None
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows as dicts, built from whole columns (DataFrame.to_dict boxes cell by cell);
    NaN and numpy values are left for orjson to write (null, plain numbers)."""
    keys = [str(c) for c in df.columns]
    columns = [df[c].to_list() for c in df.columns]
    return [dict(zip(keys, row)) for row in zip(*columns)]


def _array(chunks: Iterable[list[dict[str, Any]]]) -> orjson.Fragment:
    """Rows as a JSON array already encoded, a chunk at a time: a 1M-event pair has ~80k
    groups, and their dicts all at once would be ~200 MB beside the analysis. Indented as a
    value of a top-level key, so the file reads the same as one encoded whole (and as the
    parsed payload encodes: Document.write). A raw newline is only ever indentation: orjson
    escapes those inside strings."""
    parts = []
    for rows in chunks:
        text = orjson.dumps(rows, option=JSON_OPTIONS & ~orjson.OPT_APPEND_NEWLINE, default=_json_default)
        parts.append(text[1:-1].rstrip().replace(b"\n", b"\n  "))  # the rows without the brackets
    return orjson.Fragment(b"[" + b",".join(parts) + b"\n  ]" if parts else b"[]")


def _side_summary(b: Bundle, role: str, al: Alignment, steps: Samples) -> dict[str, Any]:
    m = b.manifest
    times = al.source_times if role == "source" else al.target_times
    return {
        "bundle": role,
        "input": str(b.path),
        "label": b.label,
        "profiler": m.get("profiler"),
        "device": m.get("device", {}),
        "framework_versions": m.get("framework_versions") or m.get("versions") or {},  # live captures: "versions"
        "model": m.get("model"),
        "model_fingerprint": model_fingerprint(m),
        "target": m.get("target"),
        "source_trace": m.get("source"),
        "stats": m.get("stats", {}),
        **({"rank": b.rank} if b.rank is not None else {}),  # one rank of a multi-rank job
        "time_basis": times.basis,
        "total_us": times.total,
        "steps": steps.n,
        "ops": int(len(b.ops)),
        "kernels": int(len(b.kernels)),
    }


def to_json(d: Diagnosis) -> dict[str, Any]:
    """The diagnosis.json payload (docs/diagnosis.md); groups already encoded. Serialises only:
    every figure is in d as the analysis left it."""
    al, g = d.alignment, d.groups
    ev = g.groupby("evidence")[["source_us", "target_us"]].sum()
    return {
        "format": FORMAT,
        "porter_version": __version__,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "inputs": {
            "source": _side_summary(d.source, "source", al, d.e2e.source),
            "target": _side_summary(d.target, "target", al, d.e2e.target),
        },
        "alignment": {
            "unit": "all profiled steps at once, ops in (step, start) order; group times are totals over the trace",
            "coverage": d.coverage(),
            "stats": al.stats,
            "time_by_evidence": {k: {"source_us": float(r.source_us), "target_us": float(r.target_us)}
                                 for k, r in ev.iterrows()},
            # live pairs only: each op call per step on both sides, paired by (module, op, call index)
            **({"op_calls": records(al.op_calls)} if al.op_calls is not None else {}),
        },
        "headline": d.headline or None,
        "pair_check": d.pair_check,
        **({"module_map": d.module_map} if d.module_map else {}),
        "end_to_end": d.e2e.to_dict(),
        "busy": d.busy,
        "groups": _array(records(g.iloc[lo:lo + CHUNK]) for lo in range(0, len(g), CHUNK)),
        "by_module": records(d.by_module),
        "by_module_kind": records(d.by_module_kind),
        "by_class": records(d.by_class),
        "by_framework_op": records(d.by_framework_op),
        "by_op_shape": records(d.by_op_shape),
        "unmatched": {side: records(df) for side, df in d.unmatched.items()},
        "roofline": d.roofline,
        "accuracy": d.accuracy,
        "fixes": d.fixes,
        "plan": d.plan,
        "warnings": d.warnings,
        "command": d.command,
        "seconds": d.seconds,
        # only diagnose --ops writes it: recorded-pair diagnoses stay as they were
        **({"portability": d.portability} if d.portability else {}),
        **({"confirmed": d.confirmed} if d.confirmed else {}),  # live pairs with --confirm N
    }


def encode(payload: dict[str, Any]) -> bytes:
    """orjson (NaN/inf -> null, numpy natively; ~10x the stdlib encoder)."""
    return orjson.dumps(payload, option=JSON_OPTIONS, default=_json_default)


def write_json(path: Path, payload: Any) -> None:
    """Any porter JSON file beside the diagnosis (the accuracy compile log), encoded alike."""
    atomic_write_bytes(path, encode(payload))


def read(path: Path) -> dict[str, Any]:
    """diagnosis.json as written (porter writes no NaN tokens: orjson reads it)."""
    return orjson.loads(Path(path).read_bytes())


@dataclass
class Document:
    """diagnosis.json of one diagnosis, from its payload to the one write.

    seconds is the Diagnosis's own dict: phases timed after the payload was built (the
    reports, the final total) reach both it and the file."""

    path: Path
    payload: dict[str, Any]  # to_json's, or the parsed file once parsed() has run
    seconds: dict[str, float] = field(default_factory=dict)
    _parsed: bool = field(default=False, init=False, repr=False)

    def parsed(self) -> dict[str, Any]:
        """The payload as a reader of the file gets it (what the reports render from), in
        place of to_json's: the two are not kept side by side."""
        if not self._parsed:
            self.payload, self._parsed = orjson.loads(encode(self.payload)), True
        return self.payload

    def write(self) -> Path:
        atomic_write_bytes(self.path, encode({**self.payload, "seconds": self.seconds}))
        return self.path
