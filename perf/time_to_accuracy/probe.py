"""Convergence facts of ternary + error feedback on the real model's gradients.

Variant "probe" trains like ternary-ef (the same hook and library state) but
also reduces each bucket's raw gradients densely (sum G over ranks), which
costs a second allreduce, so its times mean nothing.  From them:

- the error-feedback residual.  The library keeps r_i per rank and bucket:
  r_i' = g_i + r_i - s t_i, and the ternary call returns the average of
  s t_i.  Summed over ranks, R' = R + G - N * out: so the probe tracks the
  ranks' mean residual R / N exactly, from outside the library, and reports
  |R/N| next to |G/N| (the mean gradient) every `every` steps.
- the variance ternarization adds, per block size B: the scale of a block is
  the max |g| over its elements and over ranks (the library's allreduce-max),
  an element's code has variance s|g| - g^2, so the added variance relative
  to the gradient's energy is sum(s|g| - g^2) / sum(g^2) for this rank.  At
  the library's B, the measured error of the average |out - (G + R)/N|^2
  checks the formula (it should be the sum of the ranks' variances / N^2).
"""
import torch
import torch.distributed as dist

import tern.torch

BLOCKS = [64, 128, 256, 512, 1024, 4096]


def added_variance(g, block):
    """sum(s|g| - g^2) / sum(g^2) with s = max over ranks of the block's max |g|."""
    n = g.numel() // block * block
    a = g[:n].abs().reshape(-1, block)
    s = a.max(1).values
    dist.all_reduce(s, op=dist.ReduceOp.MAX)
    var = (s[:, None] * a - a * a).sum()
    if n < g.numel():  # the tail block
        t = g[n:].abs()
        st = t.max().reshape(1)
        dist.all_reduce(st, op=dist.ReduceOp.MAX)
        var += (st * t - t * t).sum()
    return float(var / (g * g).sum())


class Probe:
    def __init__(self, block, every):
        self.state = tern.torch.TernaryState(None, block=block, error_feedback=True)
        self.block = block
        self.every = every
        self.residual = {}  # tensor handle -> sum of the ranks' residuals R
        self.records = []
        self.step = 0

    def hook(self, state, bucket):
        buf = bucket.buffer()
        n = dist.get_world_size()
        g_sum = buf.clone()
        dist.all_reduce(g_sum)   # G, dense (blocking: the probe's times do not count)
        record = self.step % self.every == 0 and bucket.index() == 0
        if record:
            rec = dict(step=self.step, elements=buf.numel(),
                       variance={b: added_variance(buf, b) for b in BLOCKS})
        handle = self.state.handle(bucket)  # a rebuilt bucket gets a fresh handle: fresh residuals
        R = self.residual.get(handle)
        if R is None:
            R = self.residual[handle] = torch.zeros_like(buf)
        target = (g_sum + R) / n  # what error feedback tries to deliver this step
        out = self.state.pg.allreduce_ternary(buf, handle).get_future().wait()[0]
        R.add_(g_sum - n * out)
        if record:
            rec.update(grad_norm=float(g_sum.norm() / n), residual_norm=float(R.norm() / n),
                       error_sq=float((out - target).pow(2).sum()), grad_sq=float((g_sum / n).pow(2).sum()))
            self.records.append(rec)
        if bucket.is_last():
            self.state.end_step()
            self.step += 1
        fut = torch.futures.Future()
        fut.set_result(out)
        return fut

    def stats(self):
        return dict(self.state.stats(), probe=self.records)


def install(model, opts):
    p = Probe(opts.get("block", 256), opts.get("probe_every", 20))
    model.register_comm_hook(None, p.hook)
    return p.stats
