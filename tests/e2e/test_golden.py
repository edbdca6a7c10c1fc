"""The recorded-pair diagnosis is pinned: a refactor that should not change behaviour must
reproduce fixtures/golden/ (made by fixtures/make_golden_diagnosis.py, before the layout move)."""

from __future__ import annotations

import gzip
import json
import math
import sys

import pytest

from conftest import FIXTURES

sys.path.insert(0, str(FIXTURES))
from make_golden_diagnosis import GOLDEN, PAIR, corpus, diagnose_pair  # noqa: E402


def _diff(want, got, path="$", out=None):
    """Paths where got differs from want; floats within 1e-9 relative (json round-trip only)."""
    out = [] if out is None else out
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got)):
            if k not in want or k not in got:
                out.append(f"{path}.{k}: {'missing' if k not in got else 'new'}")
            else:
                _diff(want[k], got[k], f"{path}.{k}", out)
    elif isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            out.append(f"{path}: {len(want)} items -> {len(got)}")
        for i, (a, b) in enumerate(zip(want, got)):
            _diff(a, b, f"{path}[{i}]", out)
    elif isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        if not math.isclose(want, got, rel_tol=1e-9, abs_tol=1e-12):
            out.append(f"{path}: {want!r} -> {got!r}")
    elif want != got:
        out.append(f"{path}: {want!r} -> {got!r}")
    return out


@pytest.mark.corpus
def test_recorded_pair_diagnosis_matches_the_pinned_one(corpus, tmp_path):
    assert (corpus / PAIR[0]).is_file()
    want = json.load(gzip.open(GOLDEN, "rt"))
    got = json.loads(json.dumps(diagnose_pair(tmp_path)))
    diffs = _diff(want, got)
    assert not diffs, f"{len(diffs)} differences, first: {diffs[:10]}"
    assert len(want["groups"]) > 20 and want["alignment"]["coverage"]["target"] > 0.99  # a real pin
