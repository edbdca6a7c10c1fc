"""porter bench --confirm: a suspect series is re-run at once, for real, and stored as the next run."""

from __future__ import annotations

import pytest

from porter.bench.confirm import confirm_suspects, suspects_in
from porter.bench.context import device_class
from porter.bench.records import CaseResult, RunRecord
from porter.bench.regress import regress
from porter.bench.runner import RunnerOptions
from porter.bench.store import Store
from porter.bench.suite import Case, Suite
from porter.targets import get_stack
from tests.bench_support import REPO, synthetic_history

MODEL = f"{REPO / 'tests' / 'models' / 'planted_work.py'}:factory"


@pytest.mark.slow
def test_a_suspect_is_re_run_and_only_it(tmp_path):
    case = Case("work", MODEL, ("cpu", "cpu:inductor"))
    dev = device_class("cpu", get_stack("eager").device_info("cpu")["name"])
    history = synthetic_history(5, 10, 1, 0.5)  # the last run is 50% slower: a suspect
    store = Store(tmp_path / "h.sqlite")
    steady = synthetic_history(6, 11, 0, 0.0)
    runs = []
    for e, s in zip(history, steady):
        results = [CaseResult("work", "cpu:eager", dev, case.describe(), samples_s=e.samples_s),
                   CaseResult("work", "cpu:inductor", dev, case.describe(), samples_s=s.samples_s)]
        runs.append(RunRecord(e.run_id, "t", e.started_at, e.started_at, {"host": "h"}, {}, results))
        store.write_run(runs[-1])
    assert suspects_in(runs[-1], regress(store.histories())) == {"work": ("cpu:eager",)}

    rerun = confirm_suspects(Suite("t", (case,)), runs[-1], store, RunnerOptions(budget_s=1, min_samples=5, max_samples=10, warmup=1))
    assert rerun is not None and rerun.context["confirms_run"] == runs[-1].run_id
    assert [(r.target, r.status) for r in rerun.results] == [("cpu:eager", "ok")]  # inductor was not suspect
    hist = store.histories()[f"work | {dev} | cpu:eager"]
    assert hist[-1].run_id == rerun.run_id and len(hist) == 12
