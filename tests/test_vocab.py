"""Log-probs and entropies over the vocabulary a chunk of rows at a time (coderl.train.vocab)."""

from __future__ import annotations

import math

import pytest
import torch

from coderl.train.vocab import chunked_logprobs


def _plain(h: torch.Tensor, w: torch.Tensor, y: torch.Tensor, t: float) -> tuple[torch.Tensor, torch.Tensor]:
    logp = torch.log_softmax(h @ w.t() / t, dim=-1)  # [M, V]
    return logp.gather(-1, y[:, None])[:, 0], -(logp.exp() * logp).sum(-1)


def test_two_rows_by_hand() -> None:
    """Logits [0, ln 3] and [ln 3, 0] (weight = identity): p = (1/4, 3/4); target 1 then 1."""
    w = torch.eye(2)
    h = torch.tensor([[0.0, math.log(3.0)], [math.log(3.0), 0.0]])
    logp, entropy = chunked_logprobs(h, w, torch.tensor([1, 1]), 1.0, with_entropy=True, chunk=1)
    assert logp.tolist() == pytest.approx([math.log(0.75), math.log(0.25)], abs=1e-6)
    h_expected = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert entropy is not None and entropy.tolist() == pytest.approx([h_expected, h_expected], abs=1e-6)


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
@pytest.mark.parametrize("with_entropy", [False, True])
@pytest.mark.parametrize("chunk", [1, 8, 1000])
def test_values_and_gradients_match_the_full_logits(temperature: float, with_entropy: bool, chunk: int) -> None:
    torch.manual_seed(0)
    rows, dim, vocab = 37, 16, 101
    h = torch.randn(rows, dim, requires_grad=True)
    w = torch.randn(vocab, dim, requires_grad=True)
    y = torch.randint(0, vocab, (rows,))
    a, b = torch.randn(rows), torch.randn(rows)
    logp, entropy = chunked_logprobs(h, w, y, temperature, with_entropy, chunk)
    loss = (logp * a).sum() + ((entropy * b).sum() if entropy is not None else 0.0)
    grads = torch.autograd.grad(loss, [h, w])
    t = 1.0 if temperature == 0.0 else temperature  # greedy is scored at T = 1, as the engine does
    logp_ref, entropy_ref = _plain(h, w, y, t)
    loss_ref = (logp_ref * a).sum() + ((entropy_ref * b).sum() if with_entropy else 0.0)
    grads_ref = torch.autograd.grad(loss_ref, [h, w])
    assert torch.allclose(logp, logp_ref, atol=1e-5)
    assert (entropy is None) != with_entropy
    if entropy is not None:
        assert torch.allclose(entropy, entropy_ref, atol=1e-5)
    for got, want in zip(grads, grads_ref, strict=True):
        assert torch.allclose(got, want, atol=1e-4)


def test_a_frozen_projection_gets_no_gradient_and_a_bad_chunk_is_refused() -> None:
    h = torch.randn(4, 3, requires_grad=True)
    w = torch.randn(5, 3)  # frozen (a LoRA base weight)
    logp, _ = chunked_logprobs(h, w, torch.tensor([0, 1, 2, 3]), 1.0)
    logp.sum().backward()
    assert h.grad is not None and w.grad is None
    with pytest.raises(ValueError, match="chunk: got 0"):
        chunked_logprobs(h, w, torch.tensor([0, 1, 2, 3]), 1.0, chunk=0)
