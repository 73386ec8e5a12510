"""Synthetic tasks with known answers, registered by name.

Every task has a fixed word list, so its tokenizer does not depend on the seed or on n: a train
set and a test set drawn with different seeds share one tokenizer. Examples are word lists joined
by spaces; `generate` encodes exactly the texts that `example_texts` returns.

sparse_evidence (classification, the default task)
    4 classes, 2 marker words each. An example is 16–64 words long and holds 1–4 markers, all of
    one class, at random positions; the label is that class (no noise). The other words are
    distractors w0…w59 plus 0–2 decoys (echo, foxtrot, golf, hotel) that look like markers but
    carry no signal. Markers are about 7% of an example's tokens on average.
tagging (token tagging)
    8–32 words drawn from t0…t27; a word is tagged "repeated" when the same word occurs at
    another position of its sequence, else "unique" (about half of the tokens are repeated).
    A token's tag depends on the other tokens, so it needs attention (or recurrence).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from attndeploy.data.dataset import TextDataset
from attndeploy.data.tokenizer import WordTokenizer
from attndeploy.errors import DataError
from attndeploy.models.families import training_part

# An example: its words and its label (a class index, or one tag index per word).
Example = tuple[list[str], int | list[int]]
Sampler = Callable[[np.random.Generator, int, int], list[Example]]


@dataclass(frozen=True)
class TaskSpec:
    """A registered synthetic task: metadata plus the sampler that draws its examples."""

    name: str
    head: str
    description: str
    default_max_seq: int
    label_names: tuple[str, ...]
    words: tuple[str, ...]  # every word the task emits: its tokenizer's vocabulary after specials
    min_len: int  # shortest example the task draws
    sampler: Sampler = field(repr=False, compare=False)

    def tokenizer(self) -> WordTokenizer:
        """The task's tokenizer: <pad>, <unk>, then `words` in their fixed order."""
        return WordTokenizer([WordTokenizer.PAD, WordTokenizer.UNK, *self.words])

    def sample(self, n: int, *, seed: int, max_seq: int | None = None) -> list[Example]:
        """`n` examples as (words, label); deterministic given `seed`.

        `max_seq` caps the length: lengths are drawn from [min_len, min(default_max_seq, max_seq)],
        so passing a model's larger max_seq leaves the task unchanged.
        """
        if n < 1:
            raise DataError(f"a task needs n >= 1 examples; got {n}")
        max_len = self.default_max_seq if max_seq is None else min(max_seq, self.default_max_seq)
        if max_len < self.min_len:
            raise DataError(
                f"task {self.name!r} draws examples of at least {self.min_len} tokens; "
                f"max_seq={max_seq} is too small"
            )
        return self.sampler(np.random.default_rng(seed), n, max_len)

    def generate(
        self, n: int, *, seed: int, max_seq: int | None = None
    ) -> tuple[TextDataset, WordTokenizer]:
        """`n` encoded examples and the task's tokenizer; same seed -> identical tensors."""
        examples = self.sample(n, seed=seed, max_seq=max_seq)
        tokenizer = self.tokenizer()
        texts = [" ".join(words) for words, _ in examples]
        width = max(len(words) for words, _ in examples)
        input_ids, attention_mask = tokenizer.encode_batch(texts, max_seq=width)
        part = training_part(self.head)  # the labels are its family's: [N] or [N, T]
        labels = part.labels_tensor([label for _, label in examples], input_ids.shape[1])
        dataset = TextDataset(input_ids, attention_mask, labels, self.label_names, self.head)
        return dataset, tokenizer


TASKS: dict[str, TaskSpec] = {}


def register_task(
    name: str,
    *,
    head: str,
    description: str,
    default_max_seq: int,
    label_names: tuple[str, ...],
    words: tuple[str, ...],
    min_len: int,
) -> Callable[[Sampler], Sampler]:
    """Decorator: register a sampler as task `name`; a name registered twice fails."""

    def decorate(sampler: Sampler) -> Sampler:
        if name in TASKS:
            raise DataError(f"task {name!r} is registered twice")
        TASKS[name] = TaskSpec(
            name, head, description, default_max_seq, label_names, words, min_len, sampler
        )
        return sampler

    return decorate


def task_names() -> tuple[str, ...]:
    return tuple(TASKS)


def get_task(name: str) -> TaskSpec:
    """The task registered as `name`; an unknown name lists the valid ones."""
    try:
        return TASKS[name]
    except KeyError:
        raise DataError(f"unknown task {name!r}; valid: {', '.join(TASKS)}") from None


def example_texts(name: str, n: int, seed: int, *, max_seq: int | None = None) -> list[str]:
    """The texts of `get_task(name).generate(n, seed=seed, max_seq=max_seq)`, in order."""
    return [" ".join(words) for words, _ in get_task(name).sample(n, seed=seed, max_seq=max_seq)]


# ---------------------------------------------------------------- sparse_evidence

SPARSE_LABELS = ("alpha", "bravo", "charlie", "delta")
SPARSE_MARKERS = {  # class name -> its marker words
    "alpha": ("alpha", "amber"),
    "bravo": ("bravo", "bronze"),
    "charlie": ("charlie", "cobalt"),
    "delta": ("delta", "denim"),
}
SPARSE_DECOYS = ("echo", "foxtrot", "golf", "hotel")
SPARSE_DISTRACTORS = tuple(f"w{i}" for i in range(60))
SPARSE_MIN_LEN = 16
SPARSE_MARKERS_PER_EXAMPLE = (1, 4)  # inclusive range
SPARSE_DECOYS_PER_EXAMPLE = (0, 2)


@register_task(
    "sparse_evidence",
    head="classification",
    description=(
        "4 classes set by 1-4 marker words (2 per class) hidden among 16-64 distractors and decoys"
    ),
    default_max_seq=64,
    label_names=SPARSE_LABELS,
    words=(
        *(marker for name in SPARSE_LABELS for marker in SPARSE_MARKERS[name]),
        *SPARSE_DECOYS,
        *SPARSE_DISTRACTORS,
    ),
    min_len=SPARSE_MIN_LEN,
)
def _sample_sparse_evidence(rng: np.random.Generator, n: int, max_len: int) -> list[Example]:
    # Every draw is made for all n examples at once (fast, and one fixed order of draws).
    lengths = rng.integers(SPARSE_MIN_LEN, max_len + 1, size=n)  # [n]
    labels = rng.integers(len(SPARSE_LABELS), size=n)  # [n]
    lo_markers, hi_markers = SPARSE_MARKERS_PER_EXAMPLE
    lo_decoys, hi_decoys = SPARSE_DECOYS_PER_EXAMPLE
    n_markers = rng.integers(lo_markers, hi_markers + 1, size=n)  # [n]
    n_decoys = rng.integers(lo_decoys, hi_decoys + 1, size=n)  # [n]
    distractors = rng.integers(len(SPARSE_DISTRACTORS), size=(n, max_len))  # [n, L]
    # Random distinct positions inside each example: sort random keys, pads' keys last.
    keys = rng.random((n, max_len))  # [n, L]
    keys[np.arange(max_len)[None, :] >= lengths[:, None]] = np.inf
    positions = np.argsort(keys, axis=1)  # [n, L]
    n_special = hi_markers + hi_decoys
    marker_picks = rng.integers(2, size=(n, n_special))  # which of the class's 2 markers
    decoy_picks = rng.integers(len(SPARSE_DECOYS), size=(n, n_special))
    examples: list[Example] = []
    for i in range(n):
        words = [SPARSE_DISTRACTORS[j] for j in distractors[i, : lengths[i]]]
        markers = SPARSE_MARKERS[SPARSE_LABELS[labels[i]]]
        for k in range(n_markers[i] + n_decoys[i]):
            if k < n_markers[i]:
                words[positions[i, k]] = markers[marker_picks[i, k]]
            else:
                words[positions[i, k]] = SPARSE_DECOYS[decoy_picks[i, k]]
        examples.append((words, int(labels[i])))
    return examples


# ---------------------------------------------------------------- tagging

TAGGING_LABELS = ("unique", "repeated")
# 28 words: with 8–32 tokens about half of all tokens have a duplicate in their sequence.
TAGGING_WORDS = tuple(f"t{i}" for i in range(28))
TAGGING_MIN_LEN = 8


def duplicate_tags(words: list[str]) -> list[int]:
    """1 where the word occurs at another position of `words`, else 0."""
    counts = Counter(words)
    return [int(counts[word] > 1) for word in words]


@register_task(
    "tagging",
    head="tagging",
    description="tag each of 8-32 words 'repeated' if it occurs elsewhere in its sequence",
    default_max_seq=32,
    label_names=TAGGING_LABELS,
    words=TAGGING_WORDS,
    min_len=TAGGING_MIN_LEN,
)
def _sample_tagging(rng: np.random.Generator, n: int, max_len: int) -> list[Example]:
    lengths = rng.integers(TAGGING_MIN_LEN, max_len + 1, size=n)  # [n]
    draws = rng.integers(len(TAGGING_WORDS), size=(n, max_len))  # [n, L]
    examples: list[Example] = []
    for i in range(n):
        words = [TAGGING_WORDS[j] for j in draws[i, : lengths[i]]]
        examples.append((words, duplicate_tags(words)))
    return examples
