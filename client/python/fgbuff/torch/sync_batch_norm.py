"""SyncBatchNorm with Horovod's semantics: in training, batch statistics over every rank's batch
(ranks may have different batch sizes); in eval, or with one rank, plain batch norm. The weight
and bias gradients stay local (the optimizer averages them); the input gradient uses the global
sums of dy and dy*(x-mean). Forward statistics go through fgbuff.torch's ad-hoc job; backward's
sums through a separate job and handle (`<base>.bwd`), since backward runs on autograd's thread.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from . import _core
from ._adhoc import SUM


def _sum_all(t: torch.Tensor, backward: bool) -> torch.Tensor:
    co = _core._bwd(t) if backward else _core._coll(t, what="SyncBatchNorm")
    out = torch.empty_like(t)
    co.run(lambda: co.allreduce(t, out, SUM, None, 1.0, 1.0))
    return out


class _SyncBN(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: Optional[torch.Tensor],
                bias: Optional[torch.Tensor], running_mean: Optional[torch.Tensor],
                running_var: Optional[torch.Tensor], eps: float, momentum: float
                ) -> torch.Tensor:
        c = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        xf = x.double()
        count = torch.tensor([x.numel() / c], dtype=torch.float64, device=x.device)
        stats = torch.cat([xf.sum(dims), (xf * xf).sum(dims), count])
        g = _sum_all(stats, backward=False)
        n = g[2 * c]
        mean = g[:c] / n
        var = (g[c:2 * c] / n - mean * mean).clamp_min(0)
        invstd = torch.rsqrt(var + eps)
        if running_mean is not None and running_var is not None:
            with torch.no_grad():
                unbiased = var * n / max(float(n) - 1.0, 1.0)
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype),
                                                    alpha=momentum)
        shape = [1, c] + [1] * (x.dim() - 2)
        xhat = (xf - mean.view(shape)) * invstd.view(shape)
        y = xhat
        if weight is not None:
            y = y * weight.double().view(shape)
        if bias is not None:
            y = y + bias.double().view(shape)
        ctx.save_for_backward(x, weight, mean, invstd, n)
        ctx.has_bias = bias is not None
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Tuple[Any, ...]:
        x, weight, mean, invstd, n = ctx.saved_tensors
        c = x.shape[1]
        dims = [0] + list(range(2, x.dim()))
        shape = [1, c] + [1] * (x.dim() - 2)
        dyf = dy.double()
        xmu = x.double() - mean.view(shape)
        sum_dy = dyf.sum(dims)
        sum_dy_xmu = (dyf * xmu).sum(dims)
        gw = (sum_dy_xmu * invstd).to(weight.dtype) if weight is not None else None
        gb = sum_dy.to(weight.dtype) if ctx.has_bias and weight is not None else None
        g = _sum_all(torch.cat([sum_dy, sum_dy_xmu]), backward=True)
        mean_dy = (g[:c] / n).view(shape)
        mean_dy_xmu = (g[c:] / n).view(shape)
        w = weight.double().view(shape) if weight is not None else 1.0
        iv = invstd.view(shape)
        dx = (dyf - mean_dy - xmu * iv * iv * mean_dy_xmu) * iv * w
        return dx.to(x.dtype), gw, gb, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Drop-in for torch.nn.BatchNorm*d (any input of 2+ dimensions), synchronised over ranks."""

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self._check_input_dim(input)
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked)
            else:
                momentum = self.momentum
        else:
            momentum = 0.0 if self.momentum is None else self.momentum
        if not self.training or _core.size() == 1:
            use_batch = self.training or not self.track_running_stats
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight,
                                self.bias, use_batch, momentum, self.eps)
        return _SyncBN.apply(input, self.weight, self.bias,
                             self.running_mean if self.track_running_stats else None,
                             self.running_var if self.track_running_stats else None,
                             self.eps, momentum)
