"""`porter ops`: a model's portability matrix (ops x stacks), predicted from each stack's own
registries, confirmed by running each op alone on the stack, and costed from the fix
catalogue. inventory.py (torch.export -> op variations), predict.py (registries),
confirm.py (runs), cost.py (fix catalogue), matrix.py (the torch-free data), build.py
(orchestration), coreaten.py (--all-core-aten), diff.py (two matrices)."""
