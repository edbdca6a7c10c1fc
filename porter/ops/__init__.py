"""`porter ops`: a model's portability matrix (ops x stacks), predicted from each stack's own
registries, confirmed by running each op alone on the stack, and costed from the fix
catalogue. inventory.py (torch.export -> op variations), oneop.py (one op as a module),
predict.py (registries), confirm.py (runs), cost.py (fix catalogue), matrix.py (the
torch-free ops.json data), build.py (orchestration), coreaten.py (--all-core-aten),
diff.py (two matrices), in_diagnosis.py (diagnose --ops).

May import: capture, targets, analysis and the storage layer; never the reports, diagnose,
the readers or the CLI (the CLI renders ops.json through reports.ops_page).
"""
