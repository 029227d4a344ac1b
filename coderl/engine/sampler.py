"""Token sampling and the logprobs the engine reports.

**Which distribution the logprobs come from.** For a request with temperature ``T > 0`` the reported
logprob of a sampled token ``y`` is ``log_softmax(logits / T)[y]`` over the *full* vocabulary, i.e.
temperature-scaled and taken **before** top-k / top-p truncation. For greedy requests (``T = 0``) it is
``log_softmax(logits)[y]`` (``T = 1``). This is the policy the trainer scores: it recomputes
``log_softmax(logits / T)`` with the same ``T`` (see :func:`token_logprobs`, which both sides use).
Top-k / top-p only decide which token is drawn; the trainer cannot see the truncation, so reporting
the truncated distribution would make rollout and trainer disagree on every truncated step.

Sampling draws one uniform number per step from the request's own generator and inverts the CDF of
the (truncated, renormalised) distribution, so a seeded request yields the same tokens whether it
runs alone or batched with others.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from coderl.engine.params import SamplingParams


def effective_temperature(temperature: float) -> float:
    """The T used for reported logprobs: the request's temperature, or 1 for greedy decoding."""
    return temperature if temperature > 0 else 1.0


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float) -> torch.Tensor:
    """Logprobs of ``token_ids`` under ``log_softmax(logits / T)``: logits ``[..., V]``, ids ``[...]``."""
    scaled = logits.float() / effective_temperature(temperature)  # [..., V]
    return torch.log_softmax(scaled, dim=-1).gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)  # [...]


@dataclass
class SampleRequest:
    """One row to sample: its parameters and its private random generator."""

    params: SamplingParams
    generator: torch.Generator


def sample(logits: torch.Tensor, rows: list[SampleRequest]) -> tuple[list[int], list[float]]:
    """Sample one token per row of ``logits`` ``[S, V]``; returns ids and their logprobs.

    Greedy rows and untruncated sampling rows are handled in one vectorised pass each (one device
    sync per step, which matters on CUDA); only top-k / top-p rows take a per-row path.
    """
    dev = logits.device
    temps = torch.tensor(
        [effective_temperature(r.params.temperature) for r in rows], dtype=torch.float32, device=dev
    )
    logp = torch.log_softmax(logits.float() / temps[:, None], dim=-1)  # [S, V]
    chosen = torch.argmax(logp, dim=-1)  # [S]  (kept for greedy rows)
    plain = [
        i
        for i, r in enumerate(rows)
        if r.params.temperature > 0 and r.params.top_k == 0 and r.params.top_p >= 1.0
    ]
    if plain:
        idx = torch.tensor(plain, dtype=torch.long, device=dev)  # [P]
        cdf = torch.cumsum(logp[idx].exp(), dim=-1)  # [P, V]
        u = torch.tensor([float(torch.rand((), generator=rows[i].generator)) for i in plain], dtype=cdf.dtype)
        points = (u.to(dev) * cdf[:, -1])[:, None]  # [P, 1]
        drawn = torch.searchsorted(cdf, points, right=True).clamp(max=cdf.shape[1] - 1).squeeze(1)  # [P]
        chosen[idx] = drawn
    for i, row in enumerate(rows):
        p = row.params
        if p.temperature > 0 and (p.top_k > 0 or p.top_p < 1.0):
            chosen[i] = _draw(logp[i], p, row.generator)
    lps = logp.gather(1, chosen[:, None]).squeeze(1)  # [S]
    return chosen.tolist(), lps.tolist()


def verify_draft(logits: torch.Tensor, draft: list[int], row: SampleRequest) -> tuple[list[int], list[float]]:
    """Speculative sampling against a draft of known tokens: ``logits`` ``[len(draft) + 1, V]``, row
    ``i`` the model's next-token logits before ``draft[i]`` (the last row: after the whole draft).
    Returns the tokens to append (the accepted prefix of the draft, then one token the model chose)
    and their logprobs (:func:`token_logprobs`' definition).

    Greedy: a draft token is kept while it is the argmax, and the first that is not is replaced by
    the argmax, so the tokens are greedy decoding's. Sampling: draft token ``d`` is kept with
    probability ``p(d)`` (``p`` the tempered, top-k / top-p truncated distribution the token is drawn
    from); a rejected one is replaced by a draw from ``p`` without ``d``, renormalised. A draft is one
    known token (the draft distribution is a point mass), so this is the standard speculative-sampling
    rule and every token is distributed exactly as :func:`sample` would draw it."""
    p = row.params
    logp = torch.log_softmax(logits.float() / effective_temperature(p.temperature), dim=-1)  # [n + 1, V]
    out: list[int] = []
    for i, d in enumerate(draft):
        if p.temperature <= 0:
            best = int(torch.argmax(logp[i]))
            out.append(best)
            if best != d:
                break
            continue
        probs = _truncated(logp[i], p)  # [V], sums to 1
        if float(torch.rand((), generator=row.generator)) < float(probs[d]):
            out.append(d)
            continue
        probs[d] = 0.0
        out.append(_inverse_cdf(probs, row.generator))
        break
    else:
        n = len(draft)
        if p.temperature <= 0:
            out.append(int(torch.argmax(logp[n])))
        else:
            out.append(_inverse_cdf(_truncated(logp[n], p), row.generator))
    lps = logp[torch.arange(len(out)), torch.tensor(out)]  # [m]
    return out, lps.tolist()


def _truncated(logp: torch.Tensor, p: SamplingParams) -> torch.Tensor:
    """The distribution a token is drawn from: softmax of ``logp`` ``[V]`` restricted by top-k, then
    top-p (as :func:`_draw` restricts it), over the whole vocabulary, zero outside, summing to 1."""
    probs, candidates = _candidates(logp, p)
    if candidates is None:
        return probs / probs.sum()
    full = torch.zeros_like(logp)  # [V]
    full[candidates] = probs / probs.sum()
    return full


def _inverse_cdf(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One draw from the unnormalised distribution ``probs`` ``[V]`` with one uniform number."""
    cdf = torch.cumsum(probs, 0)  # [V]
    point = torch.tensor([float(torch.rand((), generator=generator)) * float(cdf[-1])], dtype=cdf.dtype)
    return int(torch.searchsorted(cdf, point.to(cdf.device), right=True).clamp(max=cdf.shape[0] - 1))


def _candidates(logp: torch.Tensor, p: SamplingParams) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Probabilities kept by top-k then top-p, most likely first, and their token ids (``None``: the
    whole vocabulary in id order, nothing truncated)."""
    probs = logp.exp()  # [V]
    candidates: torch.Tensor | None = None
    if 0 < p.top_k < probs.shape[0]:
        probs, candidates = torch.topk(probs, p.top_k)  # [k], [k]
    if p.top_p < 1.0:
        if candidates is None:
            probs, candidates = torch.sort(probs, descending=True)  # [V], [V]
        cum = torch.cumsum(probs, 0)  # [C]
        # keep tokens whose preceding mass is below top_p: the smallest set reaching top_p
        keep = int(torch.count_nonzero(cum - probs < p.top_p * cum[-1]))
        probs, candidates = probs[: max(keep, 1)], candidates[: max(keep, 1)]
    return probs, candidates


def _draw(logp: torch.Tensor, p: SamplingParams, generator: torch.Generator) -> int:
    """Inverse-CDF draw from softmax restricted by top-k then top-p; ``logp`` is ``[V]``."""
    probs, candidates = _candidates(logp, p)
    j = _inverse_cdf(probs, generator)
    return j if candidates is None else int(candidates[j])
