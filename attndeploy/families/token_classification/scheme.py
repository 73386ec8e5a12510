"""Tagging schemes: which tag sequences a data file may hold (BIO, BIOES/BMES, or plain tags).

A tag is `O`, or `<prefix>-<type>` with prefix B (begin), I or M (inside; BMES writes M), E
(end) or S (single), or a plain tag with no prefix (`NN`, `unique`: a tag set that is no entity
scheme, e.g. parts of speech, which is then not checked). A file's scheme is read off its tags:

- `BIOES` when any tag starts E-, S- or M- (BMES is BIOES with M for I);
- `BIO` when the prefixed tags are all B- or I-;
- `plain` when no tag has a prefix (`O` alone counts as no prefix);
- prefixed and plain tags mixed (other than `O`) is refused.

What each scheme forbids (strictly, as seqeval's strict mode and the Bakeoff scorer count spans):

- BIO: I-X anywhere but after B-X or I-X.
- BIOES: I-X/M-X or E-X anywhere but after B-X or I-X/M-X; B-X or I-X/M-X not followed by
  I-X/M-X or E-X (so a sentence may not end in one).

A forbidden sequence is a DataError naming the line of the offending tag (`check_tags`);
`allowed_transitions` gives the same rules as the pairs, first and last tags a CRF may decode.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from attndeploy.errors import DataError

OUTSIDE = "O"
PREFIXES = ("B", "I", "M", "E", "S")
BIO, BIOES, PLAIN = "BIO", "BIOES", "plain"


def split_tag(tag: str) -> tuple[str, str]:
    """(prefix, type): `B-PER` -> ("B", "PER"), `O` -> ("O", ""), a plain tag -> ("", tag)."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    prefix, dash, kind = tag.partition("-")
    if dash and prefix in PREFIXES and kind:
        return prefix, kind
    return "", tag


def scheme_of(tags: Iterable[str]) -> str:
    """The scheme a set of tags is written in (the module docstring); DataError when prefixed
    and plain tags are mixed."""
    prefixes = {split_tag(tag)[0] for tag in tags} - {OUTSIDE}
    if "" in prefixes and prefixes - {""}:
        plain = sorted(tag for tag in set(tags) if split_tag(tag)[0] == "")
        raise DataError(f"tags mix an entity scheme (B-/I-/E-/S- prefixes) with plain tags "
                        f"{', '.join(plain[:5])}; use one or the other")
    if not prefixes or prefixes == {""}:
        return PLAIN
    return BIOES if prefixes & {"E", "S", "M"} else BIO


def check_tags(tags: Sequence[str], where: Sequence[str], scheme: str) -> None:
    """DataError naming `where[i]` (the file:line of tag i) at the first tag `scheme` forbids."""
    if scheme == PLAIN:
        return
    open_type = ""  # the type of the entity begun and not yet closed ("" when none is open)
    for index, tag in enumerate(tags):
        prefix, kind = split_tag(tag)
        if prefix in ("I", "M", "E") and kind != open_type:
            after = f"after {tags[index - 1]!r}" if index else "at the start of a sentence"
            raise DataError(f"{where[index]}: tag {tag!r} {after} is not allowed in {scheme} "
                            f"(it continues an entity that was not begun)")
        if scheme == BIOES and open_type and prefix not in ("I", "M", "E"):
            raise DataError(f"{where[index]}: tag {tag!r} after {tags[index - 1]!r} is not "
                            f"allowed in {scheme} (the {open_type} entity was not ended by E-)")
        if prefix == "B" or (scheme == BIO and prefix == "I"):
            open_type = kind
        elif prefix in ("I", "M"):
            pass  # BIOES: still open
        else:  # E, S, O (BIO's B/I handled above)
            open_type = ""
    if scheme == BIOES and open_type:
        raise DataError(f"{where[-1]}: the sentence ends inside a {open_type} entity "
                        f"({tags[-1]!r}); {scheme} ends every entity with E- or S-")


def allowed_transitions(label_names: Sequence[str]) -> tuple[list[list[bool]], list[bool],
                                                            list[bool]]:
    """(pairs [C][C]: tag i may be followed by tag j, may_start [C], may_end [C]) under the
    scheme of `label_names` (the same rules as `check_tags`); a plain tag set allows all."""
    scheme = scheme_of(label_names)
    parts = [split_tag(name) for name in label_names]
    count = len(label_names)
    if scheme == PLAIN:
        return [[True] * count for _ in range(count)], [True] * count, [True] * count
    inside = ("I", "M", "E") if scheme == BIOES else ("I",)  # continues an open entity
    opens = ("B", "I", "M") if scheme == BIOES else ("B", "I")  # leaves an entity open

    def may_follow(before: tuple[str, str], after: tuple[str, str]) -> bool:
        (prefix, kind), (next_prefix, next_kind) = before, after
        if next_prefix in inside:
            return prefix in opens and kind == next_kind
        return scheme == BIO or prefix not in opens  # BIOES: an open entity must continue

    pairs = [[may_follow(before, after) for after in parts] for before in parts]
    may_start = [prefix not in inside for prefix, _ in parts]
    may_end = [scheme == BIO or prefix not in opens for prefix, _ in parts]
    return pairs, may_start, may_end
