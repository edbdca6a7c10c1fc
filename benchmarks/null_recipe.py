"""A tune's control: a tuned side prepared with no settings, timed as a recipe would be (twice).
Its recovery must be zero within its interval; before the rounds' order was balanced it read
+55-85 us on transformer -> xla (BENCHMARKS.md, "porter tune").

    python benchmarks/null_recipe.py [xla|cpu:inductor]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from porter.capture.tuned import prepare_side
from porter.runtime.policy import measured
from porter.tune.candidates import plan_for
from porter.tune.run import Tuner, TuneOptions


def main() -> None:
    target = sys.argv[1] if len(sys.argv) > 1 else "xla"
    plan = plan_for("transformer", "cpu", target)
    with measured() as policy:
        tuner = Tuner(plan, Path(tempfile.mkdtemp()), TuneOptions(budget_s=120, fresh=True), lambda m: None, policy)
        for i in range(2):
            rec = tuner.time_side(prepare_side(tuner.model, plan.target, {}), 15.0, f"null {i}")
            r = rec["recovered_us"]
            print(json.dumps({"target": target, "run": i + 1, "recovered_us": r["value"], "ci95": r["ci95"],
                              "kept": rec["kept"]}), flush=True)


if __name__ == "__main__":
    main()
