"""Canonical op classes from framework op names, HLO op names and kernel names.

One taxonomy for every reader, so an aten::addmm on an H100, a `dot` fusion on a TPU
and a `Cijk_...` rocBLAS kernel on an MI300X all land in `matmul`. Rules are ordered
regular expressions: the first that matches wins, so specific patterns (attention,
softmax) come before generic ones (elementwise).
"""

from __future__ import annotations

import re
from functools import lru_cache

# (class, tokens) over framework-level op names: aten::*, jax primitives / HLO op names, ONNX
# op types. A name is reduced to its short snake-case form first (namespace and overload
# dropped, CamelCase split: 'fbgemm::permute_2D_sparse_data' -> 'permute_2d_sparse_data',
# 'SplitLookupFunction' -> 'split_lookup_function', 'ReduceMean' -> 'reduce_mean'), and a
# rule matches whole '_'-separated tokens only, so 'conv' never hits 'convert_element_type'
# and 'gemm' never hits the 'fbgemm' namespace. First match wins. docs/opclass.md lists the
# taxonomy with examples; tests/core/test_opclass.py checks every example and that no op name
# lands in two classes anywhere in the trace corpus.
_FRAMEWORK_RULES: tuple[tuple[str, str], ...] = (
    # a hand-written kernel called as one op: a Pallas call (Mosaic on TPU, Triton on GPU, or
    # interpreted), whatever it computes inside
    ("custom_kernel", r"pallas_call|tpu_custom_call"),
    # inductor's generated kernels say their kind in their prefix; the fused op names after it
    # (unsafe_view, mean, mul...) would mislead the rules below
    ("matmul", r"triton_tem\w*mm\w*"),
    ("reduction", r"triton_red\w*|triton_per\w*"),
    ("elementwise", r"triton_poi\w*|cpp_fused\w*"),
    ("attention", r"attention|attn|sdpa|flash|mha|fmha|multihead"),
    ("softmax", r"softmax"),
    ("norm", r"(?:layer|batch|group|rms|instance)_?norm(?:alization)?|layernorm|rmsnorm|batchnorm|groupnorm"),
    ("conv", r"conv(?:\dd)?|conv_transpose\dd|convolution|conv_depthwise\dd|slow_conv\w*"),
    ("matmul", r"mm|bmm|addmm|addbmm|baddbmm|matmul|mat_mul|linear|qlinear|dot|vdot|einsum|scaled_mm|gemm|gemv|dot_general"
               r"|tensordot|mv|addmv|fused_matmul|fused_mat_mul"),
    ("embedding", r"embedding|embedding_bag|index_select|gather|take_along_axis|take_along_dim|take|split_lookup\w*|\w+_lookup_function"),
    ("optimizer", r"optimizer|adam|adamw|sgd|lamb|foreach|fused_adam|fused_adamw"),
    ("memset", r"zero|zeros|zeros_like|fill|fill_|ones|ones_like|full|full_like|new_zeros|new_ones|new_full|empty|empty_like"
               r"|empty_strided|new_empty|new_empty_strided|memset"),
    ("elementwise", r"select_n|clamp|clamp_min|clamp_max|clip|where"),  # before copy/reduction's select, max, min
    ("copy", r"as_strided|resolve_conj|resolve_neg|alias|detach|t|memcpy|copy|to|to_copy|copy_from|contiguous|clone|cat"
             r"|concat|concatenate|stack|hstack|vstack|transpose|permute|reshape|view|unsafe_view|reshape_alias|slice"
             r"|expand|expand_as|split|split_with_sizes|chunk|unbind|pad|constant_pad_nd|reflection_pad\dd|dynamic_slice"
             r"|dynamic_update_slice|bitcast|index_put|index_copy|index|scatter|scatter_add|scatter_reduce|select"
             r"|narrow|unsqueeze|squeeze|flatten|unflatten|tile|repeat|repeat_interleave|roll|flip|iota|cast|lift_fresh"
             r"|broadcast|broadcast_in_dim|broadcast_to|movedim|masked_scatter|masked_select|set"),
    ("reduction", r"pool|pool\dd|pool\dd_with_indices|sum|nansum|mean|nanmean|max|min|amax|amin|aminmax|argmax|argmin"
                  r"|prod|reduce|cumsum|cumprod|topk|sort|argsort|var|std|var_mean|std_mean|logsumexp|all|any|nonzero"
                  r"|count_nonzero|norm|vector_norm|frobenius_norm|median|nanmedian|quantile|nanquantile|mode|kthvalue"
                  r"|unique|unique_consecutive|loss|nll|cross_entropy|histc|bincount|cummax|cummin"),
    ("sync", r"synchronize|item|local_scalar_dense|block_until_ready|wait|is_nonzero|equal"),
    ("elementwise", r"add|sub|rsub|mul|div|true_divide|floor_divide|remainder|fmod|gelu|relu|relu6|leaky_relu|silu|sigmoid"
                    r"|log_sigmoid|tanh|exp|exp2|expm1|log|log1p|log2|log10|sqrt|rsqrt|pow|square|neg|abs|masked_fill"
                    r"|dropout|native_dropout|erf|erfc|erfinv|sin|cos|tan|atan|atan2|asin|acos|sinh|cosh|maximum|minimum"
                    r"|compare|convert|accumulate_grad|eq|ne|lt|gt|le|ge|logical|bitwise|floor|ceil|round|trunc|sign|sgn"
                    r"|reciprocal|hardtanh|hardswish|hardsigmoid|mish|elu|selu|celu|softplus|softsign|threshold|lerp"
                    r"|addcmul|addcdiv|triu|tril|rotary|rope|integer_pow|fusion|pointwise|cpp_fused|triton_poi|elementwise"
                    r"|vectorized|rand|randn|randint|rand_like|randn_like|normal|uniform|bernoulli|multinomial|arange"
                    r"|linspace|isnan|isinf|isfinite|nan_to_num|polar|complex|real|imag|angle|conj|sigmoid_backward"
                    r"|gelu_backward|threshold_backward|silu_backward|tanh_backward|erf_inv|not|and|or|xor|shift_left"
                    r"|shift_right_logical|shift_right_arithmetic|exponential|logistic|clz|popcnt|is_finite"),
)
# Collectives are told by their namespace (c10d::, _c10d_functional::, nccl:*) or these tokens.
_COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional", "nccl", "rccl")
_COLLECTIVE = r"nccl|rccl|all_reduce|allreduce|all_gather|allgather|reduce_scatter|all_to_all|alltoall|send|recv|barrier|collective|psum|all_gather_into_tensor|record_param_comms"
_OVERLOAD = re.compile(r"\.(default|Tensor|Scalar|out|self|int|input|dim|dim_IntList|Tensor_mode|using_ints|values)$")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")


def op_tokens(name: str) -> tuple[str, str]:
    """(namespace, short snake-case name): 'aten::addmm.default' -> ('aten', 'addmm'),
    'jit(f)/fc1/dot_general' -> ('', 'dot_general'), 'SplitLookupFunction' -> ('', 'split_lookup_function')."""
    short = name.rsplit("/", 1)[-1].strip()
    ns, _, op = short.rpartition("::")
    op = _OVERLOAD.sub("", op)
    snake = re.sub(r"[^0-9a-zA-Z]+", "_", _CAMEL.sub("_", op)).strip("_").lower()
    return ns.split(":", 1)[0].lower(), re.sub(r"(?:_?backward)?\d*$", "", snake) or snake


def _tokens(alternatives: str) -> re.Pattern[str]:
    return re.compile(rf"(?:^|_)(?:{alternatives})(?:_|$)")


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

_COMPILED_FW = [(cls, _tokens(p)) for cls, p in _FRAMEWORK_RULES]
_COMPILED_COLLECTIVE = _tokens(_COLLECTIVE)
_COMPILED_KERNEL = [(cls, re.compile(p)) for cls, p in _KERNEL_RULES]


# A name is classified by its first CLASSIFY_CHARS characters: what says its class is at its
# start (real C++ kernel names reach ~5,100 characters), and a 200 MB name from a damaged or
# hostile trace took the rules' 420 searches 64 s (and the cache kept it alive).
CLASSIFY_CHARS = 16384


def classify_op(name: str) -> str:
    """Class of a framework-level op (aten::*, HLO/jax op, ONNX op type)."""
    return _classify_op(name[:CLASSIFY_CHARS])


@lru_cache(maxsize=65536)
def _classify_op(name: str) -> str:
    ns, short = op_tokens(name)
    if ns in _COLLECTIVE_NAMESPACES or name.startswith(("nccl:", "rccl:")) or _COMPILED_COLLECTIVE.search(short):
        return "collective"
    for cls, pattern in _COMPILED_FW:
        if pattern.search(short):
            return cls
    return "other"


def classify_kernel(name: str) -> str:
    """Class of a device kernel from its (possibly mangled) name."""
    return _classify_kernel(name[:CLASSIFY_CHARS])


@lru_cache(maxsize=65536)
def _classify_kernel(name: str) -> str:
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


# xprof's HLO categories (the hlo_category stat of a TPU XPlane's op, hlo_stats' category
# column) -> porter's class. A category names what XLA made of the op, where a fusion's name is
# only its first instructions (broadcast_add_fusion is a loop fusion: an add, not a copy).
# Specific classes porter reads from the op (norm, softmax, attention, a custom kernel) are kept.
_CATEGORY_CLASSES: tuple[tuple[str, str], ...] = (
    ("all-reduce|all-gather|all-to-all|reduce-scatter|collective|send|recv|ragged-all-to-all", "collective"),
    ("copy-start|copy-done|data formatting|broadcast|slice fusion|copy", "copy"),
    ("convolution|output fusion", "matmul"),  # XLA:TPU writes a dot as a convolution; an output fusion is a dot's epilogue
    ("input fusion|reduce|sort|scatter|select-and-scatter", "reduction"),
    ("loop fusion|non-fusion elementwise|elementwise", "elementwise"),
)
_KEPT_CLASSES = {"norm", "softmax", "attention", "custom_kernel", "conv"}


def class_for_category(category: str | None, cls: str) -> str:
    """The class an op of xprof's HLO category gets (cls: what the op's names said)."""
    if not category or cls in _KEPT_CLASSES:
        return cls
    for pattern, target in _CATEGORY_CLASSES:
        if re.search(pattern, category):
            if (target == "matmul" and cls in ("matmul", "conv", "attention")) or (target == "reduction" and cls == "copy"):
                return cls  # a dot XLA calls a convolution; an input fusion that is a transpose
            return target
    return cls


def canonical_op(name: str) -> str:
    """An op call's name as eager and torchax both see it: no namespace, no overload, no dunder
    (``aten::add.Tensor``, ``aten::add`` and ``__add__`` are all ``add``). torchax meets some calls
    at the torch-function level (``linear``), eager's profiler names them ``aten::linear``
    (porter.targets.call_tags)."""
    op = name.rpartition("::")[2].split(".")[0]
    return op.strip("_") or op
