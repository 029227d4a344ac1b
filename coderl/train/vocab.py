"""Log-probs and entropies of scored tokens, computed over the vocabulary a chunk of rows at a time.

The plain way — ``logits = lm_head(hidden)`` for every scored row, then ``log_softmax`` — holds a
``[M, V]`` float32 matrix (M scored tokens, V = 49,152 for SmolLM2: 0.8 GB at M = 4,096), its
log-softmax copy, and in the backward pass their gradients: several GB of short-lived tensors per
micro-batch, most of a 135M run's peak memory. :func:`chunked_logprobs` gives the same numbers
(``log_softmax(hidden @ W.T / T)[target]`` and, when asked, the entropy of that distribution) with at
most ``chunk`` rows of logits alive: the forward pass keeps one log-sum-exp per row, and the backward
pass recomputes each chunk's logits, forms the softmax gradient in place and multiplies it back
into the hidden states and the projection weight. The price is one more ``hidden @ W.T`` in the
backward pass (the projection is about a fifth of a small model's FLOPs).

Gradients (z = hidden W^T / T, p = softmax(z), y the target, H the entropy):
``d logp_y / dz = onehot(y) - p`` and ``dH / dz = -p * (log p + H)``; both are scaled by 1/T into
the logits, then into ``hidden`` (``@ W``) and ``W`` (``^T @ hidden``).

Owns: that computation and its autograd. Must not: know about sequences, masks or losses (the
actor splits and pads; :mod:`coderl.train.batch` weighs).
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F

from coderl.engine.sampler import effective_temperature

DEFAULT_CHUNK = 512
"""Rows of logits alive at once: 512 x 49,152 float32 = 100 MB."""


class _ChunkedLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,  # [M, E]
        weight: torch.Tensor,  # [V, E]
        targets: torch.Tensor,  # [M]
        inv_t: float,
        chunk: int,
        with_entropy: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows = hidden.shape[0]
        logp = torch.empty(rows, dtype=torch.float32, device=hidden.device)  # [M]
        lse = torch.empty(rows, dtype=torch.float32, device=hidden.device)  # [M]
        entropy = torch.zeros(rows if with_entropy else 0, dtype=torch.float32, device=hidden.device)  # [M]
        for s in range(0, rows, chunk):
            e = min(s + chunk, rows)
            z = F.linear(hidden[s:e], weight).float() * inv_t  # [c, V]
            lse[s:e] = torch.logsumexp(z, dim=-1)  # [c]
            logp[s:e] = z.gather(-1, targets[s:e, None])[:, 0] - lse[s:e]  # [c]
            if with_entropy:
                z.sub_(lse[s:e, None])  # [c, V] log p
                entropy[s:e] = -(z.exp() * z).sum(dim=-1)  # [c]
        ctx.save_for_backward(hidden, weight, targets, lse, entropy)
        ctx.inv_t, ctx.chunk = inv_t, chunk
        device = hidden.device.type  # the backward pass recomputes the logits as the forward made them
        ctx.autocast = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        ctx.mark_non_differentiable(lse)
        return logp, entropy

    @staticmethod
    def backward(
        ctx: Any, grad_logp: torch.Tensor, grad_entropy: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None, None, None]:
        hidden, weight, targets, lse, entropy = ctx.saved_tensors
        inv_t, chunk = ctx.inv_t, ctx.chunk
        want_hidden, want_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None  # [M, E]
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if want_weight else None  # [V, E]
        # an entropy reported but not in the loss gets an all-zero gradient: skip its [c, V] term then
        with_entropy = entropy.numel() > 0 and grad_entropy is not None and bool(grad_entropy.any())
        device = hidden.device.type
        recompute = (
            torch.autocast(device_type=device, dtype=ctx.autocast)
            if ctx.autocast is not None
            else contextlib.nullcontext()
        )
        for s in range(0, hidden.shape[0], chunk):
            e = min(s + chunk, hidden.shape[0])
            h = hidden[s:e]  # [c, E]
            with recompute:
                z = F.linear(h, weight)  # [c, V]
            logp_all = z.float().mul_(inv_t).sub_(lse[s:e, None])  # [c, V] log p
            p = logp_all.exp()  # [c, V]
            # dH/dz = -p (log p + H), before p is reused in place below
            ent_term = logp_all.add_(entropy[s:e, None]).mul_(p).mul_(-grad_entropy[s:e, None]) if with_entropy else None
            if grad_logp is not None:  # d logp_y / dz = onehot(y) - p
                dz = p.mul_(-grad_logp[s:e, None])  # [c, V]
                dz.scatter_add_(-1, targets[s:e, None], grad_logp[s:e, None].float())
            else:
                dz = torch.zeros_like(p)  # [c, V]
            if ent_term is not None:
                dz.add_(ent_term)
            dz = dz.mul_(inv_t).to(z.dtype)  # into the unscaled logits, in the dtype they were made in
            if grad_hidden is not None:
                grad_hidden[s:e] = (dz @ weight.to(dz.dtype)).to(hidden.dtype)  # [c, E]
            if grad_weight is not None:
                grad_weight += (dz.t() @ h.to(dz.dtype)).float()  # [V, E]
        return (
            grad_hidden,
            grad_weight.to(weight.dtype) if grad_weight is not None else None,
            None,
            None,
            None,
            None,
        )


def chunked_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    temperature: float,
    with_entropy: bool = False,
    chunk: int = DEFAULT_CHUNK,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Float32 ``log_softmax(hidden @ weight.T / T)[targets]`` per row ``[M]`` and, with
    ``with_entropy``, the entropy of each row's distribution ``[M]`` (else None); differentiable in
    ``hidden`` and ``weight``. T is the engine's (:func:`coderl.engine.sampler.effective_temperature`:
    greedy scores at T = 1), so the trainer scores what the rollout sampled from."""
    if chunk < 1:
        raise ValueError(f"chunk: got {chunk}; give at least 1 row")
    inv_t = 1.0 / effective_temperature(temperature)
    logp, entropy = _ChunkedLogProbs.apply(hidden, weight, targets, inv_t, chunk, with_entropy)
    return logp, entropy if with_entropy else None
