"""Analysis layer: stateless functions over schema tables.

Alignment (``align``, ``infer_scope``, ``optime``), time attribution (``attribute``,
``views``), cost and roofline (``opcost``, ``groupcost``, ``perfmodel``, ``roofline``),
the fix catalogue and its ranking (``fixes``, ``fixplan``) and activation comparison
(``accuracy``).

May import: porter.core.schema, porter.core.opclass, porter.core.errors, porter.core.units and the data files in
porter/data. Never torch, the capture layer, the targets, the reports or the CLI (the
import contracts in pyproject.toml fail CI if it does), so a diagnosis of recorded traces
runs without a model stack installed.
"""
