import torch, time
torch.manual_seed(0)
class Frag(torch.nn.Module):
    def forward(self, x):
        # variance by the textbook one-pass formula: E[x^2] - E[x]^2, cancels when mean >> std
        m = x.mean(-1, keepdim=True)
        v = (x * x).mean(-1, keepdim=True) - m * m
        return (x - m) * torch.rsqrt(v.clamp_min(1e-12))
class Frag2(torch.nn.Module):
    def forward(self, x):
        return (x + 1e4).sum(-1) - 1e4 * x.shape[-1]
x = torch.randn(8, 4096) * 1.0 + 3000.0
for M in (Frag(), Frag2()):
    e = M(x)
    c = torch.compile(M, backend="inductor", fullgraph=True)(x)
    ref = M.double()(x.double()) if False else None
    d = M(x.double())
    rel = lambda a, b: float((a.double()-b.double()).norm()/b.double().norm())
    print(type(M).__name__, "eager vs compiled", rel(c, e), "eager vs fp64", rel(e, d), "compiled vs fp64", rel(c, d))
