"""torch set up as a GPU peer of the bench: cuBLAS and cuDNN with TF32 off, the case's arrays on the GPU.

Where it sits: `simaccel bench` times each region case's torch equivalent beside TVM alone
(bench.py), `simaccel bench --ops` each op's kernel beside torch's (bench_ops.py); both start
from `torch_on_gpu`. torch is optional (the torch extra): without it there is no peer.
"""

from __future__ import annotations


def torch_on_gpu(arrays):
    """(torch, torch.nn.functional, `arrays` as CUDA tensors), TF32 off for matmuls and
    convolutions (float32 means float32, as simaccel's kernels compute); None without torch."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch, F, [tensor(torch, a).cuda() for a in arrays]


def tensor(torch, array):
    """A numpy array as a torch tensor (bfloat16, which torch cannot take from numpy, as its bits)."""
    import numpy as np

    if array.dtype.name == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(array).view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(array)
