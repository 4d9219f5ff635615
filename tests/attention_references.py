"""Random attention maps and rollout written out in numpy: the references of the explanation tests."""

import numpy as np
import torch


def random_attentions(layers=3, batch=2, heads=4, prefix=1, grid=(2, 3), seed=0):
    generator = torch.Generator().manual_seed(seed)
    T = prefix + grid[0] * grid[1]
    return [torch.randn(batch, heads, T, T, generator=generator).mul(2).softmax(-1) for _ in range(layers)]


def reference_rollout(attentions, fusion="mean", start_layer=0, prefix=1):
    """Abnar & Zuidema written out with numpy loops in float64: the reference."""
    result = []
    for b in range(attentions[0].shape[0]):
        T = attentions[0].shape[-1]
        rollout = np.eye(T)
        for a in attentions[start_layer:]:
            heads = a[b].double().numpy()
            fused = {"mean": heads.mean(0), "max": heads.max(0), "min": heads.min(0)}[fusion] + np.eye(T)
            for i in range(T):
                fused[i] = fused[i] / fused[i].sum()  # each row by its own sum
            rollout = fused @ rollout
        result.append(rollout[0, prefix:])
    return torch.tensor(np.array(result))
