"""The linear-chain CRF: its loss is the forward algorithm's exact log-likelihood and Viterbi
finds the best path, both checked against enumerating every tag sequence of short rows."""

from __future__ import annotations

import itertools

import pytest
import torch

from attndeploy.models.crf import LinearChainCRF

pytestmark = pytest.mark.usefixtures("torch_defaults")


def _crf(num_tags: int = 3) -> LinearChainCRF:
    crf = LinearChainCRF(num_tags)
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.normal_()
    return crf


def _every_score(crf: LinearChainCRF, emissions: torch.Tensor, length: int) -> dict:
    """{path: score} over every tag sequence of one row's first `length` tokens."""
    mask = torch.ones(1, length, dtype=torch.bool)
    with torch.no_grad():
        return {path: float(crf.score(emissions[None, :length], torch.tensor([path]), mask))
                for path in itertools.product(range(crf.num_tags), repeat=length)}


def test_the_loss_is_log_z_minus_the_gold_score_by_enumeration() -> None:
    crf = _crf()
    emissions = torch.randn(2, 4, 3)  # [b, t, C]
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    tags = torch.tensor([[0, 2, 1, 1], [2, 0, -100, -100]])
    expected = []
    for row, length in enumerate((4, 2)):
        scores = _every_score(crf, emissions[row], length)
        log_z = torch.logsumexp(torch.tensor(list(scores.values())), 0)
        expected.append(float(log_z) - scores[tuple(tags[row, :length].tolist())])
    got = crf.nll(emissions, tags, mask).detach()
    assert got.item() == pytest.approx(sum(expected) / 2, abs=1e-5)


def test_viterbi_returns_the_best_path_by_enumeration_and_pads_with_the_pad_tag() -> None:
    crf = _crf(4)
    emissions = torch.randn(3, 5, 4)
    lengths = (5, 3, 1)
    mask = torch.arange(5)[None, :] < torch.tensor(lengths)[:, None]  # [b, t]
    best = crf.viterbi(emissions, mask, pad_tag=0)
    for row, length in enumerate(lengths):
        scores = _every_score(crf, emissions[row], length)
        assert tuple(best[row, :length].tolist()) == max(scores, key=scores.get)
        assert best[row, length:].tolist() == [0] * (5 - length)


def test_a_zero_crf_decodes_like_a_softmax_tagger() -> None:
    crf = LinearChainCRF(3)  # zero transitions: each token's argmax
    emissions = torch.randn(2, 6, 3)
    mask = torch.ones(2, 6, dtype=torch.bool)
    assert torch.equal(crf.viterbi(emissions, mask), emissions.argmax(-1))


# ----------------------------------------------------------------------------- constraints
BMES = ("O", "B-LOC", "M-LOC", "E-LOC", "S-LOC", "B-PER", "E-PER")


def _valid_bmes(path: tuple[int, ...]) -> bool:
    from attndeploy.errors import DataError
    from attndeploy.families.token_classification.scheme import BIOES, check_tags

    try:
        check_tags([BMES[tag] for tag in path], ["x"] * len(path), BIOES)
    except DataError:
        return False
    return True


def _constrained(num_tags: int = len(BMES)) -> LinearChainCRF:
    from attndeploy.families.token_classification.scheme import allowed_transitions

    crf = _crf(num_tags)
    crf.forbid(*allowed_transitions(BMES))
    return crf


def test_the_scheme_rules_and_check_tags_agree_on_every_short_sequence() -> None:
    """`allowed_transitions` allows exactly the sequences `check_tags` accepts (length ≤ 3)."""
    from attndeploy.families.token_classification.scheme import allowed_transitions

    pairs, may_start, may_end = allowed_transitions(BMES)
    for length in (1, 2, 3):
        for path in itertools.product(range(len(BMES)), repeat=length):
            allowed = (may_start[path[0]] and may_end[path[-1]]
                       and all(pairs[a][b] for a, b in zip(path, path[1:], strict=False)))
            assert allowed == _valid_bmes(path), [BMES[tag] for tag in path]


@pytest.mark.parametrize(("names", "forbidden"), [
    (("O", "B-X", "I-X", "B-Y", "I-Y"), {("O", "I-X"), ("B-Y", "I-X"), ("I-Y", "I-X"),
                                         ("O", "I-Y"), ("B-X", "I-Y"), ("I-X", "I-Y")}),
    (("NN", "VB", "O"), set()),
])
def test_bio_forbids_an_inside_tag_after_another_entity_and_plain_tags_forbid_nothing(
        names, forbidden) -> None:
    from attndeploy.families.token_classification.scheme import allowed_transitions

    pairs, may_start, may_end = allowed_transitions(names)
    got = {(a, b) for i, a in enumerate(names) for j, b in enumerate(names) if not pairs[i][j]}
    assert got == forbidden
    assert all(may_end)  # BIO may end anywhere
    assert [name for name, ok in zip(names, may_start, strict=True) if not ok] == [
        name for name in names if name.startswith("I-")]


def test_constrained_viterbi_is_the_best_allowed_path_by_enumeration() -> None:
    torch.manual_seed(1)
    crf = _constrained()
    emissions = torch.randn(3, 4, len(BMES)) * 3  # [b, t, C]: strong, often forbidden argmaxes
    lengths = (4, 3, 1)
    mask = torch.arange(4)[None, :] < torch.tensor(lengths)[:, None]  # [b, t]
    best = crf.viterbi(emissions, mask)
    unconstrained = LinearChainCRF(len(BMES))
    unconstrained.load_state_dict(crf.state_dict())  # the same scores, no constraint
    differs = 0
    for row, length in enumerate(lengths):
        scores = {path: score for path, score in _every_score(crf, emissions[row], length).items()
                  if _valid_bmes(path)}
        path = tuple(best[row, :length].tolist())
        assert path == max(scores, key=scores.get) and _valid_bmes(path)
        differs += path != tuple(unconstrained.viterbi(emissions, mask)[row, :length].tolist())
    assert differs  # the constraint changed a decision here


def test_the_constrained_loss_is_normalised_over_the_allowed_paths_only() -> None:
    crf = _constrained()
    emissions = torch.randn(1, 3, len(BMES))
    gold = torch.tensor([[1, 3, 0]])  # B-LOC E-LOC O
    scores = _every_score(crf, emissions[0], 3)
    allowed = torch.tensor([score for path, score in scores.items() if _valid_bmes(path)])
    expected = float(torch.logsumexp(allowed, 0)) - scores[(1, 3, 0)]
    got = crf.nll(emissions, gold, torch.ones(1, 3, dtype=torch.bool)).item()
    assert got == pytest.approx(expected, abs=1e-4)
    assert torch.isfinite(crf.nll(emissions, gold, torch.ones(1, 3, dtype=torch.bool)))


def test_the_constraint_is_not_saved_in_the_state_dict() -> None:
    crf = _constrained()
    assert crf.is_constrained and not LinearChainCRF(3).is_constrained
    assert set(crf.state_dict()) == {"transitions", "start", "end"}
    with pytest.raises(ValueError, match="shape"):
        crf.forbid([[True]], [True], [True])
