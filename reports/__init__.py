"""Rendering layer: diagnosis.json -> report.html (self-contained), report.md, summary.md.

``build.py`` adapts a diagnosis into the typed ``model.ReportModel`` and writes the files;
``view.py`` derives what the templates show (charts from ``charts.py``, plain-words summary);
``render.py`` runs the Jinja2 templates in ``templates/`` (shipped as package data).

May import: porter.core.errors, porter.core.units and porter.core.atomic, and read diagnosis.json; never
the analysis, capture, targets, bundles, readers or the CLI, so a report can be re-rendered
from a diagnosis written on another machine.
"""
