"""Which dtype this machine computes in: asked by the rollout engines and by the learner alike,
so that the policy samples in the precision it is trained in."""

from __future__ import annotations


def bf16_supported(device_type: str) -> bool:
    """bf16 where the hardware computes it natively: CUDA's own check; on CPU oneDNN's
    (AVX512-BF16 / AMX), the kernels torch's bf16 matmuls run on. A CPU with AVX512F alone
    emulates bf16 and is slower in it than in fp32."""
    import torch  # here, not at the top: spade_ray.rollout is imported by config.py

    if device_type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
