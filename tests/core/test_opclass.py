"""One class per op, on every device: the documented examples, the issue's misfires, and the corpus."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from conftest import REPO, corpus_files
from porter.bundles.ingest import open_any
from porter.core.opclass import class_for_category, classify_op, op_tokens
from porter.core.schema import OP_CLASSES

EXAMPLE = re.compile(r"^\| `([^`]+)` \| (\w+) \|$")


def documented_examples() -> list[tuple[str, str]]:
    text = (REPO / "docs" / "opclass.md").read_text()
    rows = [m.groups() for line in text.splitlines() if (m := EXAMPLE.match(line))]
    assert len(rows) >= 30
    return rows


@pytest.mark.parametrize("name,cls", documented_examples())
def test_documented_example(name, cls):
    assert cls in OP_CLASSES
    assert classify_op(name) == cls


@pytest.mark.parametrize("category,names_said,cls", [
    ("loop fusion", "copy", "elementwise"),  # broadcast_add_fusion: named by its first instruction
    ("copy-done", "copy", "copy"), ("all-reduce", "reduction", "collective"), ("data formatting", "elementwise", "copy"),
    ("convolution fusion", "elementwise", "matmul"), ("convolution fusion", "conv", "conv"),
    ("input fusion", "elementwise", "reduction"), ("input fusion", "copy", "copy"),
    ("loop fusion", "norm", "norm"), ("custom-call", "custom_kernel", "custom_kernel"), ("while", "other", "other"),
    (None, "copy", "copy"),
])
def test_xprofs_hlo_category_sets_the_class_where_the_names_are_not_specific(category, names_said, cls):
    assert class_for_category(category, names_said) == cls


def test_short_names():
    assert op_tokens("aten::addmm.default") == ("aten", "addmm")
    assert op_tokens("jit(f)/fc1/dot_general") == ("", "dot_general")
    assert op_tokens("SplitLookupFunction") == ("", "split_lookup_function")
    assert op_tokens("fbgemm::permute_2D_sparse_data") == ("fbgemm", "permute_2d_sparse_data")


@pytest.mark.corpus
def test_no_framework_op_lands_in_two_classes_across_the_corpus():
    traces = corpus_files("kineto", "*.json.gz") + corpus_files("xplane", "*.xplane.pb") + corpus_files("rocprof")
    if not traces:
        pytest.skip("trace corpus not found")
    classes: dict[str, dict[str, str]] = defaultdict(dict)
    for path in traces:
        ops = open_any(path).ops
        named = ops[ops["framework_op"] != ""]
        for name, cls in named[["framework_op", "op_class"]].drop_duplicates().itertuples(index=False):
            classes[name][cls] = path.name
    split = {name: by for name, by in classes.items() if len(by) > 1}
    assert not split, split
    assert len(classes) > 100
