"""The docs that describe data formats must stay true to the code."""

from pathlib import Path

from porter.schema import KERNEL_COLUMNS, OP_CLASSES, OPS_COLUMNS

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_schema_doc_lists_every_column_and_class():
    text = (DOCS / "schema.md").read_text()
    for col in OPS_COLUMNS + KERNEL_COLUMNS:
        assert f"`{col.name}`" in text, col.name
    for cls in OP_CLASSES:
        assert f"`{cls}`" in text, cls
