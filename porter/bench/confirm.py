"""`porter bench --confirm`: re-run at once the cases whose newest run is a suspect.

A suspect (one slow run) waits for the next scheduled run to be confirmed or cleared;
with --confirm the bench re-runs just those case x target pairs right away and stores
that as the next run, so one CI job ends with a verdict. The re-run is judged by the
same rule (two consecutive runs), nothing is relaxed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from porter.bench.records import RunRecord
from porter.bench.regress import SUSPECT, RegressReport, regress
from porter.bench.runner import RunnerOptions, run_suite
from porter.bench.store import Store
from porter.bench.suite import Suite


def suspects_in(run: RunRecord, report: RegressReport) -> dict[str, tuple[str, ...]]:
    """case name -> targets of this run whose series is a suspect."""
    suspect = {v.series for v in report.verdicts if v.status == SUSPECT}
    found: dict[str, tuple[str, ...]] = {}
    for r in run.results:
        if r.key.text in suspect:
            found[r.case] = found.get(r.case, ()) + (r.target,)
    return found


def confirm_suspects(suite: Suite, run: RunRecord, store: Store, opts: RunnerOptions,
                     progress: Callable[[str], None] = lambda m: None) -> RunRecord | None:
    """Re-run the suspect pairs of run (already stored) and store the re-run; None if there were none."""
    todo = suspects_in(run, regress(store.histories()))
    if not todo:
        return None
    cases = tuple(replace(c, stacks=todo[c.name]) for c in suite.cases if c.name in todo)
    progress(f"re-running {sum(len(c.stacks) for c in cases)} suspect series to confirm or clear them")
    rerun = run_suite(Suite(suite.name, cases), opts, progress)
    rerun.context["confirms_run"] = run.run_id
    store.write_run(rerun)
    return rerun


__all__ = ["confirm_suspects", "suspects_in"]
