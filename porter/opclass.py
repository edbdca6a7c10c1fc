"""Canonical op classes from framework op names, HLO op names and kernel names.

One taxonomy for every reader, so an aten::addmm on an H100, a `dot` fusion on a TPU
and a `Cijk_...` rocBLAS kernel on an MI300X all land in `matmul`. Rules are ordered
regular expressions: the first that matches wins, so specific patterns (attention,
softmax) come before generic ones (elementwise).
"""

from __future__ import annotations

import re
from functools import lru_cache

# (class, pattern) over framework-level names: aten::*, jax primitives / HLO op names, ONNX op types.
_FRAMEWORK_RULES: tuple[tuple[str, str], ...] = (
    ("attention", r"attention|sdpa|flash|mha|multi_head|efficient_attention|cudnn_attention|paged_attention"),
    ("softmax", r"softmax"),
    ("norm", r"layer_?norm|batch_?norm|group_?norm|rms_?norm|instance_?norm|native_norm|normalization|\bnorm\b|_norm_"),
    ("conv", r"conv|cudnn_convolution|miopen_convolution|mkldnn_convolution"),
    ("matmul", r"\b(aten::)?(mm|bmm|addmm|addbmm|baddbmm|matmul|linear|dot|einsum|_scaled_mm|gemm|gemv|dot_general|tensordot|fused_matmul|qlinear)\b|aten::mm|aten::addmm|aten::bmm|aten::baddbmm|aten::linear|aten::matmul|\bmatmul|gemm|dot_general|\bdot\b|\bconvolution\b"),
    ("embedding", r"embedding|index_select|\bgather\b|take_along|\btake\b"),
    ("collective", r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast_|c10d::|allreduce|collective|send|recv"),
    ("optimizer", r"optimizer|adam|sgd\b|_foreach_|lamb\b|fused_adam"),
    ("memset", r"memset|\bzero_\b|aten::zero_|aten::fill_|\bfill\b|aten::zeros|aten::ones|aten::full\b|aten::empty|broadcast_in_dim"),
    ("copy", r"as_strided|resolve_conj|resolve_neg|\balias\b|detach|aten::t$|memcpy|copy|aten::to\b|aten::_to_copy|contiguous|clone|\bcat\b|aten::cat|concat|stack|transpose|permute|reshape|view|slice|expand|split|pad|dynamic_slice|dynamic_update_slice|bitcast|\bcopy\b|index_put|scatter|select|narrow|unsqueeze|squeeze|flatten|tile|repeat|roll|flip|iota|Cast|Transpose|Reshape|Concat|Slice|Gather|Expand|Unsqueeze|Squeeze"),
    ("reduction", r"pool|\bsum\b|mean|\bmax\b|\bmin\b|amax|amin|argmax|argmin|\bprod\b|reduce|cumsum|cumprod|topk|sort|\bvar\b|\bstd\b|logsumexp|\ball\b|\bany\b|ReduceMean|ReduceSum|nonzero"),
    ("sync", r"synchronize|item\b|_local_scalar_dense|block_until_ready|wait"),
    ("elementwise", r"add|sub|mul|div|gelu|relu|silu|sigmoid|tanh|exp|log|sqrt|rsqrt|pow|neg|abs|where|masked_fill|clamp|dropout|erf|sin|cos|maximum|minimum|compare|select_n|convert|eq\b|ne\b|lt\b|gt\b|le\b|ge\b|logical|bitwise|floor|ceil|round|sign|reciprocal|hardtanh|hardswish|mish|elu|softplus|threshold|lerp|addcmul|addcdiv|triu|tril|rotary|rope|integer_pow|Add|Mul|Div|Sub|Relu|Gelu|Erf|Sqrt|Pow|Tanh|Sigmoid|Where|Neg|Exp|fusion|loop_fusion|pointwise|cpp_fused|triton_poi|elementwise|vectorized"),
)

# (class, pattern) over device kernel names (CUDA, HIP, XLA, Triton, MTIA).
_KERNEL_RULES: tuple[tuple[str, str], ...] = (
    ("memcpy_", r"^dma_|^memcpy|memcpy (htod|dtoh|dtod|peer)|^Memcpy|copyBuffer|CopyHostToDevice|CopyDeviceToHost|CopyDeviceToDevice"),
    ("memset", r"^memset|^Memset|fillBuffer"),
    ("collective", r"nccl|rccl|allreduce|all_reduce|allgather|all_gather|reduce_scatter|alltoall|all-reduce|all-gather|reduce-scatter|collective-permute"),
    ("attention", r"flash|fmha|attn|attention|mha_|sdpa|cudnn_mha|_fwd_kernel|paged_attention|ck_tile::Fmha"),
    ("softmax", r"softmax|SoftMax"),
    ("norm", r"layer_?norm|LayerNorm|batch_?norm|BatchNorm|rms_?norm|RMSNorm|group_?norm|GroupNorm|instance_?norm|welford|bn_fw|bn_bw|_norm_|GradGammaBeta"),
    ("conv", r"conv|Conv|implicit_gemm|igemm|winograd|fft2d|MIOpen|miopen|dgrad|wgrad|fprop|cudnn::.*(conv|fft)|[Ii]m(\dd)?2[Cc]ol"),
    ("matmul", r"gemm|Gemm|GEMM|gemv|sm\d+_xmma|xmma_|cutlass|Cijk_|cublas|cuBLAS|hipblaslt|rocblas|ampere_.*(s|h|bf16)\d+gemm|sm90_|nvjet|magma|wmma|mfma|matmul|dot|\bmm_|_mm\b|triton_.*mm|Tensile|ck::.*Gemm|DeviceGemm|splitK|bmm|tinygemm|MatMul|convolution"),
    ("embedding", r"embedding|Embedding|indexSelect|index_select|gather_kernel|vectorized_gather|take_kernel"),
    ("reduction", r"_pool|pool_|Pool|reduce|Reduce|reduction|lpnorm|cub::|DeviceScan|scan_|argmax|argmin|topk|sort|radix|Sort|cumsum|sum_kernel|mean_kernel|norm_kernel|triton_red|triton_per"),
    ("copy", r"nchwToNhwc|nhwcToNchw|copy|Copy|transpose|Transpose|cat_|CatArray|concat|permute|contiguous|slice|index_put|scatter|unrolled_elementwise_kernel<.*direct_copy|direct_copy|bitcast|pad|dynamic-update-slice|dynamic-slice|fillFunctor|\bcopy\b"),
    ("elementwise", r"TensorOp|OpTensor|elementwise|vectorized|unrolled|pointwise|triton_poi|gelu|relu|silu|sigmoid|tanh|exp|add|mul|div|sub|where|fill|masked|dropout|clamp|activation|Activation|fusion|loop_|input_fusion|_fused_|cpp_fused|rotary|rope|Functor|kernel_ex|bias|scale|cast|convert|triton_"),
)

_COMPILED_FW = [(cls, re.compile(p, re.IGNORECASE)) for cls, p in _FRAMEWORK_RULES]
_COMPILED_KERNEL = [(cls, re.compile(p)) for cls, p in _KERNEL_RULES]


@lru_cache(maxsize=65536)
def classify_op(name: str) -> str:
    """Class of a framework-level op (aten::*, HLO/jax op, ONNX op type)."""
    short = name.rsplit("/", 1)[-1]
    for cls, pattern in _COMPILED_FW:
        if pattern.search(short):
            return cls
    return "other"


@lru_cache(maxsize=65536)
def classify_kernel(name: str) -> str:
    """Class of a device kernel from its (possibly mangled) name."""
    for cls, pattern in _COMPILED_KERNEL:
        if pattern.search(name):
            return "copy" if cls == "memcpy_" else cls
    return "other"


def classify(framework_op: str, kernel_names: list[str] | tuple[str, ...] = ()) -> str:
    """Class of an op: from its framework name first, from its kernels when that says nothing."""
    cls = classify_op(framework_op) if framework_op else "other"
    if cls != "other" or not kernel_names:
        return cls
    votes: dict[str, int] = {}
    for k in kernel_names:
        kc = classify_kernel(k)
        votes[kc] = votes.get(kc, 0) + 1
    votes.pop("other", None)
    return max(votes, key=votes.get) if votes else "other"
