"""The docs that describe data formats must stay true to the code."""

from pathlib import Path

from porter.core.schema import KERNEL_COLUMNS, OP_CLASSES, OPS_COLUMNS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_schema_doc_lists_every_column_and_class():
    text = (DOCS / "schema.md").read_text()
    for col in OPS_COLUMNS + KERNEL_COLUMNS:
        assert f"`{col.name}`" in text, col.name
    for cls in OP_CLASSES:
        assert f"`{cls}`" in text, cls


def test_architecture_doc_names_every_module():
    root = DOCS.parent
    text = (DOCS / "architecture.md").read_text()
    skip = {"tests", "benchmarks", "build"}  # and every virtual environment (.venv, CI's .venv-ci)
    packages = [p.parent for p in root.glob("*/**/__init__.py")
                if not skip & set(p.parts) and not any(part.startswith(".venv") for part in p.parts)]
    assert {"porter", "porter/analysis", "porter/capture", "porter/targets", "profilers", "reports"} <= {
        str(p.relative_to(root)) for p in packages}
    modules = [p for d in packages for p in d.glob("*.py")]
    missing = [str(p.relative_to(root)) for p in modules if p.name != "__init__.py" and p.name not in text]
    assert not missing, f"docs/architecture.md does not mention {missing}"
    folders = [str(p.relative_to(root)) + "/" for p in packages]
    assert not [f for f in folders if f"`{f}`" not in text], "docs/architecture.md maps every folder"


def test_every_layer_folder_says_what_it_may_import():
    root = DOCS.parent
    for pkg in ("porter/analysis", "porter/capture", "porter/targets", "profilers", "reports"):
        doc = (root / pkg / "__init__.py").read_text()
        assert "import" in doc.split('"""')[1], f"{pkg}/__init__.py docstring says what it may import"


def test_porter_root_holds_only_the_package_and_its_entry():
    """Every module lives in a layer folder (docs/architecture.md, 'The layers')."""
    root = DOCS.parent / "porter"
    assert sorted(p.name for p in root.glob("*.py")) == ["__init__.py", "__main__.py"]
