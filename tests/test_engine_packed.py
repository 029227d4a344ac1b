"""oneDNN-packed float32 linear layers (coderl/engine/packed.py): the same results as ``F.linear`` to
float32 rounding, a row's bits independent of the row count (what batch invariance needs), and the
packed copy kept in step with the weight it packs. The engine-level checks (greedy tokens, logprobs
against the Hugging Face forward, weight updates and releases) run in tests/test_engine.py, whose
engines compute in float32 with packing on by default, and tests/test_engine_invariant.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from coderl.engine.packed import PackedLinear, can_pack, drop_packed, pack_linears
from coderl.engine.row_probe import least_rows

pytestmark = pytest.mark.skipif(
    not can_pack(torch.device("cpu"), torch.float32), reason="this torch build has no oneDNN linear packing"
)


def _linear(n_in: int, n_out: int, seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(n_in, n_out, bias=False)


def test_a_packed_linear_computes_what_f_linear_does_and_keeps_the_same_parameter() -> None:
    plain = _linear(576, 1536)
    packed = PackedLinear(plain)
    assert packed.weight is plain.weight
    x = torch.randn(24, 576)
    with torch.inference_mode():
        got, want = packed(x), torch.nn.functional.linear(x, plain.weight)
        assert got.shape == want.shape == (24, 1536)
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-5)
        assert packed(x.view(4, 6, 576)).shape == (4, 6, 1536)  # leading dimensions kept


@pytest.mark.parametrize(("n_in", "n_out"), [(576, 1536), (1536, 576), (576, 49152)])
def test_a_rows_bits_do_not_depend_on_how_many_rows_share_the_call_or_where_it_sits(
    n_in: int, n_out: int
) -> None:
    # from the few rows this CPU's kernels need (measured: 1 on an AVX2 CPU, 2 on an AVX-512 one)
    packed = PackedLinear(_linear(n_in, n_out))
    least = least_rows([(packed, n_in, 300)], torch.float32, torch.device("cpu"))
    assert least is not None, "no padding gives a row the same bits at every count on this CPU"
    x = torch.randn(300, n_in)
    with torch.inference_mode():
        whole = packed(x)
        for n in (least, 2, 3, 5, 8, 11, 12, 24, 33, 120):
            assert torch.equal(packed(x[:n]), whole[:n]), n
        moved = packed(torch.cat([x[100:107], x[:1], x[107:130]]))
        assert torch.equal(moved[7], whole[0])


def test_a_rows_bits_through_a_layers_row_wise_work_hold_up_to_the_packed_row_block() -> None:
    """The row-wise half of a decoder layer (RMSNorm, the packed gated MLP, the residual) at
    SmolLM2-135M's shapes: a row's bits are the same alone and among up to PACKED_ROW_BLOCK rows,
    which is what lets a batch-invariant step run its rows in one call (coderl/engine/runner.py)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

    from coderl.engine.runner import PACKED_ROW_BLOCK, _at_least

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=576, intermediate_size=1536, hidden_act="silu")
    norm, mlp = LlamaRMSNorm(576), LlamaMLP(cfg)
    norm.weight.data.uniform_(0.5, 1.5)
    assert pack_linears(mlp) == 3

    def rows(x: torch.Tensor) -> torch.Tensor:
        return x + mlp(norm(x))

    probed = [(m, m.in_features, PACKED_ROW_BLOCK) for m in (mlp.gate_proj, mlp.down_proj)]
    least = least_rows(probed, torch.float32, torch.device("cpu"))
    assert least is not None, "no padding gives a row the same bits at every count on this CPU"
    x = torch.randn(PACKED_ROW_BLOCK, 576)
    with torch.inference_mode():
        whole = rows(x)
        for n in (1, 2, 7, 33, 120, 700):  # fewer than the least: padded with zero rows, as the engine does
            assert torch.equal(_at_least(rows, least, x[:n])[0], whole[:n]), n
        moved = rows(torch.cat([x[500:900], x[:1]]))
        assert torch.equal(moved[400], whole[0])


def test_the_packed_copy_follows_in_place_updates_releases_and_drops() -> None:
    plain = _linear(64, 32)
    packed = PackedLinear(plain)
    x = torch.randn(5, 64)
    with torch.inference_mode():
        first = packed(x)
    with torch.no_grad():
        plain.weight.mul_(-2.0)  # what load_weights does: copy_ in place
    with torch.inference_mode():
        assert torch.allclose(packed(x), -2.0 * first, rtol=1e-5, atol=1e-5)
    plain.weight.data = torch.zeros(32, 64)  # a release's new storage
    with torch.inference_mode():
        assert torch.equal(packed(x), torch.zeros(5, 32))
    packed.drop()
    assert packed._packed is None
    with torch.inference_mode():
        assert torch.equal(packed(x), torch.zeros(5, 32))  # packed again on use


def test_packing_a_model_keeps_its_parameter_names_and_tied_weights(tiny_model: Path) -> None:
    from coderl.checkpoint import load_model

    model = load_model(tiny_model, torch.float32, "cpu")
    names = [n for n, _ in model.named_parameters(remove_duplicate=False)]
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    ids = torch.tensor([[1, 5, 9, 13, 2]])
    with torch.inference_mode():
        want = model(ids).logits
    n = pack_linears(model)
    assert n == 7 * len(model.model.layers) + 1  # q k v o gate up down per layer, and the lm_head
    assert isinstance(model.lm_head, PackedLinear)
    assert [n for n, _ in model.named_parameters(remove_duplicate=False)] == names
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tied
    with torch.inference_mode():
        assert torch.allclose(model(ids).logits, want, rtol=1e-4, atol=1e-4)
    drop_packed(model)
    assert all(m._packed is None for m in model.modules() if isinstance(m, PackedLinear))


def test_only_float32_on_the_cpu_is_packed() -> None:
    assert not can_pack(torch.device("cpu"), torch.bfloat16)
    assert not can_pack(torch.device("cuda"), torch.float32)
    with pytest.raises(ValueError, match="without bias"):
        PackedLinear(torch.nn.Linear(4, 4, bias=True))
