"""Build the two real labelled text sets that `benchmarks/train_real.py` trains on, as JSONL.

Nothing is downloaded and nothing is installed here: the script reads what Debian's packages put
on the machine. The Debian set needs only the package lists (`apt-get update` once, as root); the
fortunes set needs the `fortunes` packages' category files and is left out, with one line saying
so, without them (`--sets debian` builds the Debian set alone and says nothing about fortunes).
They are read from the installed packages (/usr/share/games/fortunes) or, where those are not
installed, from the copy `make real-text` unpacks without root (`apt-get download fortunes
fortunes-min`, `dpkg-deb -x` into .venv/data/fortunes), which then runs this script:

    make real-text       # or: apt-get install -y fortunes fortunes-min, then
    .venv/bin/python benchmarks/real_text.py [--out benchmarks/results/real_text] [--sets debian]

Sets (one `{"text": ..., "label": ...}` object per line, sorted by label then text):

- `fortunes.jsonl`: quotations and jokes from the `fortunes` package, labelled by the category
  file they come from (8 topical categories, catch-alls such as `cookie` and `miscellaneous` left
  out). Texts of 4 to 100 words and punctuation marks, whitespace collapsed; median about 24.
- `debian.jsonl`: the one-line descriptions of Debian's binary packages (`apt-cache dumpavail`,
  the package lists `apt-get update` fetched), labelled by the package's Section (8 topical
  sections, catch-alls such as `utils` and `misc` left out). One package per source package, so
  that `foo` and `foo-data` cannot land on both sides of the split; median about 8 tokens.

In both sets a text that occurs twice is kept once (and dropped where its labels disagree), and a
label with more than `--cap` texts keeps a random `--cap` of them (seed 0), so no class dominates.
`manifest.json` records, per set, the sources, the counts per label, the SHA-256 of the file, and
the fixed split every run uses: `attndeploy train --data FILE --seed 0 --eval-fraction 0.2`.
The Debian set follows the package lists of the day (bookworm's point releases change a few
descriptions); compare results by the SHA-256 the manifest records.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attndeploy.fsutil import atomic_write_text  # noqa: E402
from attndeploy.runtime.tokenizer import WordTokenizer  # noqa: E402

FORTUNES_DIR = Path("/usr/share/games/fortunes")
# where `make real-text` unpacks the packages when they are not installed
UNPACKED_FORTUNES_DIR = ROOT / ".venv/data/fortunes/usr/share/games/fortunes"
FETCH_HINT = "make real-text, or apt-get install -y fortunes fortunes-min"
FORTUNE_CATEGORIES = ("computers", "definitions", "men-women", "politics", "science",
                      "songs-poems", "work", "zippy")
DEBIAN_SECTIONS = ("admin", "fonts", "games", "graphics", "net", "science", "sound", "text")
MIN_TOKENS, MAX_TOKENS = 4, 100
SPLIT = {"seed": 0, "eval_fraction": 0.2}
SAMPLE_SEED = 0


def _normalise(text: str) -> str:
    return " ".join(text.split())


def missing_fortune_categories(directory: Path = FORTUNES_DIR) -> list[str]:
    """The chosen categories that `directory` lacks (all of them where `fortunes` is absent)."""
    return [name for name in FORTUNE_CATEGORIES if not (directory / name).is_file()]


def find_fortunes_dir(given: Path | None) -> Path:
    """`given`, else the installed packages' folder, else `make real-text`'s unpacked copy (the
    installed one when neither holds the categories, for the message)."""
    if given is not None:
        return given
    for folder in (FORTUNES_DIR, UNPACKED_FORTUNES_DIR):
        if not missing_fortune_categories(folder):
            return folder
    return FORTUNES_DIR


def fortunes(directory: Path = FORTUNES_DIR) -> list[tuple[str, str]]:
    """(text, category) for every fortune of the chosen categories."""
    missing = missing_fortune_categories(directory)
    if missing:
        raise SystemExit(f"{directory} lacks {', '.join(missing)}: {FETCH_HINT}")
    rows = []
    for category in FORTUNE_CATEGORIES:
        raw = (directory / category).read_text(encoding="utf-8", errors="replace")
        for entry in re.split(r"^%$", raw, flags=re.MULTILINE):
            rows.append((_normalise(entry), category))
    return rows


def _dumpavail() -> str:
    try:
        done = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True,
                              check=True, errors="replace")
    except (OSError, subprocess.CalledProcessError) as err:
        raise SystemExit(
            f"apt-cache dumpavail failed ({err}); run on Debian after apt-get update") from None
    return done.stdout


def debian_descriptions(packages_text: str) -> list[tuple[str, str]]:
    """(short description, section) per source package of the chosen sections.

    A source's first binary package in the list speaks for it (`apt-cache dumpavail` lists
    packages by name); component prefixes such as `contrib/` are dropped from the section.
    """
    chosen: dict[str, tuple[str, str]] = {}
    for stanza in packages_text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace() and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        section = fields.get("Section", "").rsplit("/", 1)[-1]
        if section not in DEBIAN_SECTIONS or not fields.get("Description"):
            continue
        source = (fields.get("Source") or fields["Package"]).split()[0]
        chosen.setdefault(source, (_normalise(fields["Description"]), section))
    return list(chosen.values())


def clean(rows: list[tuple[str, str]], cap: int) -> list[tuple[str, str]]:
    """Length filter, de-duplication, a per-label cap; sorted by (label, text)."""
    labels_of: dict[str, set[str]] = defaultdict(set)
    for text, label in rows:
        if MIN_TOKENS <= len(WordTokenizer.tokenize(text)) <= MAX_TOKENS:
            labels_of[text].add(label)
    by_label: dict[str, list[str]] = defaultdict(list)
    for text, labels in labels_of.items():
        if len(labels) == 1:
            by_label[labels.pop()].append(text)
    rng = random.Random(SAMPLE_SEED)
    kept = []
    for label in sorted(by_label):
        texts = sorted(by_label[label])
        if len(texts) > cap:
            texts = sorted(rng.sample(texts, cap))
        kept.extend((text, label) for text in texts)
    return kept


def write_set(rows: list[tuple[str, str]], path: Path) -> dict:
    body = "".join(json.dumps({"text": t, "label": label}, ensure_ascii=False) + "\n"
                   for t, label in rows)
    atomic_write_text(path, body)
    lengths = sorted(len(WordTokenizer.tokenize(t)) for t, _ in rows)
    return {
        "file": path.name,
        "examples": len(rows),
        "labels": dict(sorted(Counter(label for _, label in rows).items())),
        "median_tokens": lengths[len(lengths) // 2],
        "max_tokens": lengths[-1],
        "sha256": hashlib.sha256(body.encode("utf-8")).hexdigest(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "real_text")
    parser.add_argument("--cap", type=int, default=600, help="most texts kept per label")
    parser.add_argument("--packages-file", type=Path, default=None,
                        help="a Packages file to read instead of `apt-cache dumpavail`")
    parser.add_argument("--sets", default="debian,fortunes",
                        help="comma-separated sets to build (debian, fortunes); fortunes is left "
                             "out with a line saying so where its packages are not installed")
    parser.add_argument("--fortunes-dir", type=Path, default=None,
                        help="the fortunes category files (default: the installed packages', "
                             "else make real-text's copy under .venv/data/fortunes)")
    args = parser.parse_args()
    args.fortunes_dir = find_fortunes_dir(args.fortunes_dir)
    sets = [name.strip() for name in args.sets.split(",") if name.strip()]
    unknown = sorted(set(sets) - {"debian", "fortunes"})
    if unknown or not sets:
        parser.error(f"--sets takes debian and/or fortunes, not {args.sets!r}")
    if "fortunes" in sets and missing_fortune_categories(args.fortunes_dir):
        sets.remove("fortunes")
        if not sets:
            raise SystemExit(f"nothing to build: {args.fortunes_dir} lacks the fortunes "
                             f"categories ({FETCH_HINT})")
        print(f"fortunes: left out, {args.fortunes_dir} lacks its categories (optional: "
              f"{FETCH_HINT})")
    packages = None
    if "debian" in sets:
        packages = (args.packages_file.read_text(encoding="utf-8", errors="replace")
                    if args.packages_file else _dumpavail())
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = {"split": SPLIT, "sets": {}}
    if "fortunes" in sets:
        manifest["sets"]["fortunes"] = {
            "source": f"Debian packages fortunes, fortunes-min: {args.fortunes_dir}/<category>",
            **write_set(clean(fortunes(args.fortunes_dir), args.cap),
                        args.out / "fortunes.jsonl"),
        }
    if packages is not None:
        manifest["sets"]["debian"] = {
            "source": "apt-cache dumpavail: Description (first line) labelled by Section",
            **write_set(clean(debian_descriptions(packages), args.cap),
                        args.out / "debian.jsonl"),
        }
    atomic_write_text(args.out / "manifest.json", json.dumps(manifest, indent=2) + "\n")
    for name, info in manifest["sets"].items():
        print(f"{name}: {info['examples']} texts, median {info['median_tokens']} tokens, "
              f"labels {info['labels']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
