"""Build `translation.jsonl`: German→English sentence pairs from two sources on a Debian system
(issue #51), one `{"source": German, "target": English}` object a line.

- **Ding** (Debian `trans-de-en`, `make translation-data` unpacks it into .venv/data/): each line
  is `German entries :: English entries`, the entries split by ` | ` in the same order; an entry's
  alternatives are split by `; ` (the first is kept). Kept: example sentences, the German entry
  at least 5 words and both sides ending in `.`, `?` or `!`; `{...}`, `[...]` and `(...)` notes
  are removed; entries with dictionary placeholders (`etw.`, `jdm.`, `sth.`, `sb.`) dropped.
- **gettext** (`/usr/share/locale/de/LC_MESSAGES/*.mo`, English `msgid` -> German `msgstr`):
  plural entries and untranslated ones are skipped; the context before `\\x04` is dropped;
  keyboard accelerators (`_File`, `&Open`) removed; entries with format specifiers (`%s`,
  `%(name)s`, `{0}`, `$1`), markup (`<b>`, `&amp;`), line breaks, URLs or leftover `_` dropped;
  both sides need at least 2 words and at most 40.

Whitespace is collapsed, exact duplicate pairs dropped (first kept), and pairs longer than
`--max-chars` on either side dropped. The held-out split is fixed and keeps near-duplicates on
one side (`attndeploy.models.seq2seq.pairs.split_pairs`, the one `attndeploy train` applies
with the same `--eval-fraction`); its counts are printed, and `--json` prints the summary.

Run: `.venv/bin/python benchmarks/translation_data.py [--out translation.jsonl]
[--ding .venv/data/trans-de-en/usr/share/trans/de-en] [--locale-dir DIR]
[--eval-fraction 0.05] [--json]`.
"""

from __future__ import annotations

import argparse
import gettext
import json
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attndeploy.fsutil import atomic_write_text  # noqa: E402
from attndeploy.models.seq2seq.pairs import split_pairs  # noqa: E402

DING = Path(".venv/data/trans-de-en/usr/share/trans/de-en")
LOCALE_DIR = Path("/usr/share/locale/de/LC_MESSAGES")
SENTENCE_END = (".", "?", "!")
PLACEHOLDERS = re.compile(r"\b(etw|jdm|jdn|jds|sth|sb)\.", re.IGNORECASE)
NOTES = re.compile(r"\s*(\{[^}]*\}|\[[^\]]*\]|\([^)]*\))")
FORMAT = re.compile(r"%[-+ #0-9.*]*[a-zA-Z]|%\(\w+\)|\{[^}]*\}|\$\{|\$\d|%%")
MARKUP = re.compile(r"<[^>]*>|&\w+;|&#\d+;")
ACCELERATOR = re.compile(r"[_&](?=\w)")
SPACE = re.compile(r"\s+")


def tidy(text: str) -> str:
    return SPACE.sub(" ", text).strip()


def ding_pairs(path: Path) -> list[tuple[str, str]]:
    """The example sentences of a Ding dictionary file (the module docstring)."""
    pairs = []
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            if line.startswith("#") or "::" not in line:
                continue
            german, english = line.rstrip("\n").split("::", 1)
            de_entries, en_entries = german.split(" | "), english.split(" | ")
            if len(de_entries) != len(en_entries):
                continue
            for de, en in zip(de_entries, en_entries, strict=True):
                de = tidy(NOTES.sub("", de.split("; ")[0]))
                en = tidy(NOTES.sub("", en.split("; ")[0]))
                if (len(de.split()) >= 5 and de.endswith(SENTENCE_END)
                        and en.endswith(SENTENCE_END) and len(en.split()) >= 2
                        and not PLACEHOLDERS.search(de) and not PLACEHOLDERS.search(en)):
                    pairs.append((de, en))
    return pairs


def _clean_message(text: str) -> str | None:
    text = text.split("\x04")[-1]
    if "\n" in text or "\t" in text or "://" in text or FORMAT.search(text) or MARKUP.search(
            text):
        return None
    text = tidy(ACCELERATOR.sub("", text))
    if "_" in text or not 2 <= len(text.split()) <= 40:
        return None
    return text


def gettext_pairs(folder: Path) -> tuple[list[tuple[str, str]], int, int]:
    """(clean pairs, catalogs read, entries seen) of every `*.mo` in `folder`."""
    pairs, entries, files = [], 0, sorted(folder.glob("*.mo"))
    for mo in files:
        with open(mo, "rb") as handle:
            try:
                catalog = gettext.GNUTranslations(handle)._catalog
            except (OSError, UnicodeDecodeError):
                continue
        for msgid, msgstr in catalog.items():
            entries += 1
            if not isinstance(msgid, str) or not msgid or not msgstr or msgid == msgstr:
                continue
            english, german = _clean_message(msgid), _clean_message(msgstr)
            if english and german and english != german:
                pairs.append((german, english))
    return pairs, len(files), entries


def build(ding: Path, locale_dir: Path, max_chars: int) -> tuple[list[dict], dict]:
    """The records and the counts of each step."""
    from_ding = ding_pairs(ding) if ding.is_file() else []
    from_gettext, catalogs, entries = gettext_pairs(locale_dir)
    seen, records, origin = set(), [], Counter()
    for name, pairs in (("ding", from_ding), ("gettext", from_gettext)):
        for source, target in pairs:
            if len(source) > max_chars or len(target) > max_chars or (source, target) in seen:
                continue
            seen.add((source, target))
            records.append({"source": source, "target": target})
            origin[name] += 1
    counts = {"ding_candidates": len(from_ding), "gettext_catalogs": catalogs,
              "gettext_entries": entries, "gettext_candidates": len(from_gettext),
              "pairs": len(records), "from_ding": origin["ding"],
              "from_gettext": origin["gettext"]}
    return records, counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("translation.jsonl"))
    parser.add_argument("--ding", type=Path, default=DING)
    parser.add_argument("--locale-dir", type=Path, default=LOCALE_DIR)
    parser.add_argument("--eval-fraction", type=float, default=0.05)
    parser.add_argument("--max-chars", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    if not args.ding.is_file() and not args.locale_dir.is_dir():
        print(f"error: neither {args.ding} nor {args.locale_dir} exists (make translation-data "
              "unpacks the Ding dictionary)", file=sys.stderr)
        return 2
    records, counts = build(args.ding, args.locale_dir, args.max_chars)
    if not records:
        print("error: no sentence pairs found", file=sys.stderr)
        return 2
    train, held = split_pairs([(r["source"], r["target"]) for r in records], args.eval_fraction)
    counts.update(train_pairs=len(train), held_out_pairs=len(held),
                  eval_fraction=args.eval_fraction, out=str(args.out),
                  ding=str(args.ding) if args.ding.is_file() else None)
    atomic_write_text(args.out, "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                        for r in records))
    if args.json:
        print(json.dumps(counts, indent=2))
    else:
        for name, value in counts.items():
            print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
