"""Write Fashion-MNIST as an image folder (issue #53): `OUT/train/<class>/<n>.png` (60,000) and
`OUT/test/<class>/<n>.png` (10,000), 28x28 grey PNGs, the layout `attndeploy train --data OUT`
reads (its `test/` part is then the held-out set).

The images come from Debian's `dataset-fashion-mnist` (Expat licence): the four IDX files
`{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz` under `/usr/share/datasets/fashion-mnist/`
when the package is installed. Otherwise `--fetch` downloads the .deb with `apt-get download`
into a temporary folder (no root needed) and unpacks it with `dpkg-deb -x` into
`.venv/data/dataset-fashion-mnist/`, as `make translation-data` does for `trans-de-en`; later
runs find it there.

The folder is written all or none (`attndeploy.output_set.atomic_directory`). `--limit N` keeps
the first N images of each split (a quick run); `--json` prints the summary as JSON.

Run: `.venv/bin/python benchmarks/fashion_mnist.py --out runs/fashion-mnist [--fetch]
[--idx-dir DIR] [--limit N] [--force] [--json]`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attndeploy.data.images import read_idx_pair, write_image_folder  # noqa: E402
from attndeploy.errors import AttnDeployError  # noqa: E402
from attndeploy.fsutil import check_replaceable  # noqa: E402
from attndeploy.output_set import atomic_directory  # noqa: E402

PACKAGE = "dataset-fashion-mnist"
INSTALLED = Path("/usr/share/datasets/fashion-mnist")
UNPACKED = Path(".venv/data") / PACKAGE  # where --fetch unpacks the .deb
INSIDE = Path("usr/share/datasets/fashion-mnist")
# Fashion-MNIST's ten labels, in the order of their index in the label files
CLASSES = ("t-shirt_top", "trouser", "pullover", "dress", "coat", "sandal", "shirt",
           "sneaker", "bag", "ankle_boot")
SPLITS = {"train": "train", "test": "t10k"}


def idx_files(folder: Path, split: str) -> tuple[Path, Path]:
    prefix = SPLITS[split]
    return (folder / f"{prefix}-images-idx3-ubyte.gz", folder / f"{prefix}-labels-idx1-ubyte.gz")


def find_idx_dir(given: Path | None) -> Path | None:
    """The first folder holding the four IDX files: `given`, the installed package's, then the
    one `--fetch` unpacked."""
    for folder in ([given] if given is not None else [INSTALLED, UNPACKED / INSIDE]):
        if all(path.is_file() for split in SPLITS for path in idx_files(folder, split)):
            return folder
    return None


def fetch(into: Path = UNPACKED) -> Path:
    """`apt-get download` the package into a temporary folder and `dpkg-deb -x` it into `into`;
    returns the folder of its IDX files."""
    with tempfile.TemporaryDirectory() as temp:
        subprocess.run(["apt-get", "download", PACKAGE], cwd=temp, check=True)
        debs = sorted(Path(temp).glob(f"{PACKAGE}_*.deb"))
        if not debs:
            raise RuntimeError(f"apt-get download wrote no {PACKAGE} .deb")
        staging = Path(temp) / "unpacked"
        subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(staging)], check=True)
        into.parent.mkdir(parents=True, exist_ok=True)
        if into.exists():
            shutil.rmtree(into)
        shutil.move(str(staging), str(into))
    return into / INSIDE


def write(idx_dir: Path, out: Path, *, limit: int | None, force: bool) -> dict:
    """Both splits as class folders under `out` (atomically); their counts per class."""
    check_replaceable(out, force=force)
    summary: dict = {"source": str(idx_dir), "out": str(out)}
    started = time.perf_counter()
    with atomic_directory(out, replace=force) as staging:
        for split in SPLITS:
            pixels, labels = read_idx_pair(*idx_files(idx_dir, split))
            if limit is not None:
                pixels, labels = pixels[:limit], labels[:limit]
            counts = write_image_folder(pixels, labels, CLASSES, staging / split)
            summary[split] = {"images": int(len(labels)), "per_class": counts}
    summary["seconds"] = round(time.perf_counter() - started, 1)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/fashion-mnist"))
    parser.add_argument("--idx-dir", type=Path, default=None,
                        help=f"the folder of the IDX files [default: {INSTALLED}, then "
                             f"{UNPACKED / INSIDE}]")
    parser.add_argument("--fetch", action="store_true",
                        help=f"download and unpack {PACKAGE} when no IDX files are found")
    parser.add_argument("--limit", type=int, default=None, help="the first N images per split")
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    try:
        idx_dir = find_idx_dir(args.idx_dir)
        if idx_dir is None and args.fetch and args.idx_dir is None:
            idx_dir = fetch()
        if idx_dir is None:
            where = args.idx_dir or f"{INSTALLED} or {UNPACKED / INSIDE}"
            print(f"error: no Fashion-MNIST IDX files in {where} (install {PACKAGE}, or give "
                  "--fetch to download and unpack it without root)", file=sys.stderr)
            return 2
        summary = write(idx_dir, args.out, limit=args.limit, force=args.force)
    except (AttnDeployError, subprocess.CalledProcessError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for split in SPLITS:
            print(f"{split}: {summary[split]['images']} images")
        print(f"written {summary['out']} in {summary['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
