import time, torch, sys
from porter.models import load_model
from porter.targets import get_stack
spec = load_model("transformer")
mods = dict(spec.module.named_modules())
x = torch.randn(2, 64, 128)
for stack in sys.argv[1:]:
    st = get_stack(stack)
    for name in ("blocks.0.ln1", "blocks.1.ln1", "blocks.0.attn", "blocks.1.attn", "blocks.0.attn.q", "blocks.0.attn.k", "blocks.0.attn.v", "blocks.0.mlp.fc1"):
        t0 = time.perf_counter()
        try:
            out = st.run_module(mods[name], (x,), "cpu")
            ref = mods[name](x)
            print(stack, name, out.shape, float((out - ref).abs().max()), f"{time.perf_counter()-t0:.2f}s")
        except Exception as e:
            print(stack, name, "FAIL", type(e).__name__, str(e)[:200])
