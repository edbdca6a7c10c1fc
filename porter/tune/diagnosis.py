"""`porter diagnose --tune`: the diagnosis's fix plan tried on its own live pair, into
DIAGNOSIS/tune/, and the measurements carried back into diagnosis.json (porter.tune.merge)
and its reports. diagnosis.json is rewritten atomically, so an interrupted tune leaves the
diagnosis as it was (and tune-cache.json with what was measured, for a rerun)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import orjson

from porter.core.atomic import atomic_write_bytes
from porter.tune.candidates import plan_for
from porter.tune.merge import merge_tune
from porter.tune.run import TuneOptions, tune

TUNE_FOLDER = "tune"


def tune_diagnosis(folder: Path, opts: TuneOptions, catalogue: Path | None = None, report: bool = True,
                   progress: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """Tune the diagnosis in `folder`; returns tune.json's document."""
    from reports.build import write_reports

    plan = plan_for(str(folder), None, None, (), catalogue)
    doc = tune(plan, folder / TUNE_FOLDER, opts, progress)
    path = folder / "diagnosis.json"
    merged = merge_tune(orjson.loads(path.read_bytes()), doc, TUNE_FOLDER)
    # as porter.pipeline.document writes it: NaN as null, indented (that layer is above this one)
    atomic_write_bytes(path, orjson.dumps(merged, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE, default=str))
    if report:
        write_reports(folder, ("html", "md"))
    return doc


__all__ = ["TUNE_FOLDER", "tune_diagnosis"]
