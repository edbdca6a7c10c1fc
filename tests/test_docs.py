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


def test_architecture_doc_names_every_module():
    root = DOCS.parent
    text = (DOCS / "architecture.md").read_text()
    modules = [p for d in ("porter", "porter/targets", "profilers") for p in (root / d).glob("*.py")]
    missing = [str(p.relative_to(root)) for p in modules if p.name != "__init__.py" and p.name not in text]
    assert not missing, f"docs/architecture.md does not mention {missing}"
