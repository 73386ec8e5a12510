"""Corpus BLEU and chrF as sacreBLEU 2.x computes them by default, and the two baselines beside
a translation model (issue #51). Pure Python: no torch, no sacrebleu.

- `corpus_bleu(hypotheses, references)`: one reference per sentence; sacreBLEU's defaults
  (`13a` tokenizer, 4-grams, `exp` smoothing, brevity penalty, case-sensitive).
- `corpus_chrf(hypotheses, references)`: chrF2 (character 6-grams, whitespace removed, β = 2,
  precision and recall averaged over the orders that occur, then combined).
- `copy_baseline`: the source as the translation.
- `RetrievalBaseline`: the target of the training source nearest by TF-IDF cosine over word
  1-grams and 2-grams (strong on UI strings, whose near-duplicates are many).

sacrebleu itself is not a dependency: these ~100 lines give the same numbers (the tests hold
them to sacreBLEU's documented values), and the runtime stays free of its dependencies.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Sequence

_13A = (
    (re.compile(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])"), r" \1 "),
    (re.compile(r"([^0-9])([\.,])"), r"\1 \2 "),
    (re.compile(r"([\.,])([^0-9])"), r" \1 \2"),
    (re.compile(r"([0-9])(-)"), r"\1 \2 "),
)
MAX_ORDER = 4
CHAR_ORDER, CHRF_BETA = 6, 2.0


def tokenize_13a(line: str) -> list[str]:
    """sacreBLEU's `13a` tokenizer (mteval-v13a): punctuation split off, numbers kept whole."""
    line = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        line = (line.replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                .replace("&gt;", ">"))
    line = f" {line} "
    for pattern, replacement in _13A:
        line = pattern.sub(replacement, line)
    return line.split()


def _ngrams(tokens: Sequence[str], order: int) -> Counter:
    return Counter(tuple(tokens[i:i + order]) for i in range(len(tokens) - order + 1))


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacreBLEU's corpus BLEU (0-100) of `hypotheses` against one reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    correct, totals = [0] * MAX_ORDER, [0] * MAX_ORDER
    sys_len = ref_len = 0
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        hyp, ref = tokenize_13a(hypothesis), tokenize_13a(reference)
        sys_len, ref_len = sys_len + len(hyp), ref_len + len(ref)
        for n in range(1, MAX_ORDER + 1):
            hyp_grams, ref_grams = _ngrams(hyp, n), _ngrams(ref, n)
            correct[n - 1] += sum(min(c, ref_grams[g]) for g, c in hyp_grams.items())
            totals[n - 1] += max(len(hyp) - n + 1, 0)
    precisions, smooth = [0.0] * MAX_ORDER, 1.0
    for n in range(MAX_ORDER):
        if totals[n] == 0:
            break
        if correct[n] == 0:  # `exp` smoothing
            smooth *= 2
            precisions[n] = 100.0 / (smooth * totals[n])
        else:
            precisions[n] = 100.0 * correct[n] / totals[n]
    if sys_len < ref_len:
        brevity = math.exp(1 - ref_len / sys_len) if sys_len > 0 else 0.0
    else:
        brevity = 1.0
    logs = [math.log(p) if p > 0 else -9999999999 for p in precisions]
    return brevity * math.exp(sum(logs) / MAX_ORDER)


def _char_ngrams(line: str) -> list[Counter]:
    line = "".join(line.split())
    return [Counter(line[i:i + n] for i in range(len(line) - n + 1))
            for n in range(1, CHAR_ORDER + 1)]


def corpus_chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """sacreBLEU's corpus chrF2 (0-100): statistics summed over the sentences."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    stats = [[0, 0, 0] for _ in range(CHAR_ORDER)]  # hypothesis, reference, matching n-grams
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        for n, (hyp, ref) in enumerate(zip(_char_ngrams(hypothesis), _char_ngrams(reference),
                                           strict=True)):
            stats[n][0] += sum(hyp.values())
            stats[n][1] += sum(ref.values())
            stats[n][2] += sum(min(c, ref[g]) for g, c in hyp.items())
    precision = recall = 0.0
    orders = 0
    for n_hyp, n_ref, n_match in stats:
        if n_hyp > 0 and n_ref > 0:
            precision += n_match / n_hyp
            recall += n_match / n_ref
            orders += 1
    if not orders:
        return 0.0
    precision, recall = precision / orders, recall / orders
    factor = CHRF_BETA ** 2
    if precision + recall == 0:
        return 0.0
    return 100 * (1 + factor) * precision * recall / (factor * precision + recall)


def copy_baseline(sources: Sequence[str]) -> list[str]:
    """The copy-the-source 'translation' (names, numbers and loanwords survive)."""
    return list(sources)


_WORD = re.compile(r"\w+")


def _terms(text: str) -> Counter:
    words = _WORD.findall(text.casefold())
    return Counter(words + [a + " " + b for a, b in zip(words, words[1:], strict=False)])


class RetrievalBaseline:
    """Nearest-neighbour retrieval: `translate(source)` is the target of the training source
    with the largest TF-IDF cosine (word 1- and 2-grams, idf = log(N / df) + 1); ties: the
    earliest training pair; no shared term: the most frequent training target."""

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        if not pairs:
            raise ValueError("retrieval needs at least one training pair")
        self.targets = [target for _, target in pairs]
        documents = [_terms(source) for source, _ in pairs]
        df: Counter = Counter(term for doc in documents for term in doc)
        self.idf = {term: math.log(len(documents) / count) + 1 for term, count in df.items()}
        self.postings: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for index, doc in enumerate(documents):
            weights = {t: c * self.idf[t] for t, c in doc.items()}
            norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
            for term, weight in weights.items():
                self.postings[term].append((index, weight / norm))
        self.fallback = Counter(self.targets).most_common(1)[0][0]

    def translate(self, source: str) -> str:
        scores: dict[int, float] = defaultdict(float)
        for term, count in _terms(source).items():
            weight = count * self.idf.get(term, 0.0)
            for index, doc_weight in self.postings.get(term, ()):
                scores[index] += weight * doc_weight  # the query's norm does not change the order
        if not scores:
            return self.fallback
        return self.targets[max(scores, key=lambda i: (scores[i], -i))]

    def translate_all(self, sources: Sequence[str]) -> list[str]:
        return [self.translate(source) for source in sources]
