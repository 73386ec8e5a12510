"""The CRF's Viterbi in ONNX: torch.onnx exports it as `Scan` nodes over positions with the
transition matrix inside, and onnxruntime returns exactly PyTorch's best tags at every batch
size and sequence length (one token included), the emissions passed through within 1e-5;
with and without a scheme constraint."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from attndeploy.models.crf import LinearChainCRF

pytestmark = pytest.mark.usefixtures("torch_defaults")


class _Decoder(torch.nn.Module):
    """(emissions [B, T, C], attention_mask [B, T]) -> (emissions, best tags int64 [B, T])."""

    def __init__(self, crf: LinearChainCRF) -> None:
        super().__init__()
        self.crf = crf

    def forward(self, emissions: torch.Tensor, attention_mask: torch.Tensor):
        return emissions, self.crf.viterbi(emissions, attention_mask != 0)


BIO = ("O", "B-X", "I-X", "B-Y", "I-Y", "B-Z")  # 6 tags: a scheme to constrain to


@pytest.fixture(scope="module", params=["free", "constrained"])
def exported(tmp_path_factory, request):
    torch.manual_seed(0)
    crf = LinearChainCRF(6)
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.normal_()
    if request.param == "constrained":  # the constraint is a constant of the graph too
        from attndeploy.families.token_classification.scheme import allowed_transitions

        crf.forbid(*allowed_transitions(BIO))
    decoder = _Decoder(crf).eval().requires_grad_(False)
    batch, seq = torch.export.Dim("batch", min=1), torch.export.Dim("seq", min=1, max=128)
    example = (torch.randn(2, 5, 6), torch.ones(2, 5, dtype=torch.long))
    path = tmp_path_factory.mktemp("crf") / "viterbi.onnx"
    program = torch.onnx.export(decoder, example, dynamic_shapes=({0: batch, 1: seq},
                                                                  {0: batch, 1: seq}),
                                dynamo=True, opset_version=18, verbose=False)
    program.save(str(path))
    return decoder, path


def test_the_export_holds_viterbi_as_scan_nodes(exported) -> None:
    _, path = exported
    model = onnx.load(str(path))
    assert [node.op_type for node in model.graph.node].count("Scan") == 2
    dims = [d.dim_param for d in model.graph.output[1].type.tensor_type.shape.dim]
    assert all(dims)  # batch and seq symbolic


@pytest.mark.parametrize(("batch", "seq"), [(1, 1), (3, 2), (4, 17), (8, 64)])
def test_onnxruntime_returns_pytorch_s_tags_exactly(exported, batch, seq) -> None:
    decoder, path = exported
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    generator = torch.Generator().manual_seed(batch * 100 + seq)
    emissions = torch.randn(batch, seq, 6, generator=generator)
    lengths = torch.randint(1, seq + 1, (batch,), generator=generator)
    lengths[0] = seq  # one full row
    mask = (torch.arange(seq)[None, :] < lengths[:, None]).long()  # [B, T], right-padded
    with torch.no_grad():
        expected_emissions, expected_tags = decoder(emissions, mask)
    names = [value.name for value in session.get_inputs()]
    got_emissions, got_tags = session.run(None, {names[0]: emissions.numpy(),
                                                 names[1]: mask.numpy()})
    assert np.array_equal(got_tags, expected_tags.numpy())
    np.testing.assert_allclose(got_emissions, expected_emissions.numpy(), atol=1e-5, rtol=0)
