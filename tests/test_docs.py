"""The documentation in docs/ against the code: the op table of docs/ops.md lists exactly the
registered ops, every section the code cites exists, and the code cites docs/, not notes kept
outside the repository."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CITED_DOCS = ("variants", "ops", "architecture")

# "variants.md §3.6", "docs/variants.md §2, §6" -> ("variants", "§3.6") / ("variants", "§2, §6")
SECTION_CITATION = re.compile(
    r"(?:docs/)?(variants|ops|architecture)\.md((?:,?\s*§\s?\d+(?:\.\d+)*)+)"
)
# "variants.md C3", "variants.md §6 C1, C2, C6", "variants.md C1,\nC3, C7, G2"
INVARIANT_CITATION = re.compile(
    r"(?:docs/)?variants\.md(?:\s*§\s?[\d.]*\d)?,?\s+((?:[CQGE]\d+\b(?:\s*[–-]\s*[CQGE]?\d+)?,?\s*)+)"
)
# 'ops.md, "Model-level interface"', 'architecture.md "Validation"'
QUOTED_CITATION = re.compile(r'(?:docs/)?(variants|ops|architecture)\.md,?\s*\(?"([^"\n]+)"')
# 'see "Serving: facts about Triton here" in the architecture notes' (or "in docs/architecture.md")
NOTES_CITATION = re.compile(
    r'"([^"\n]+)"\s+in\s+(?:the\s+architecture\s+notes|(?:docs/)?architecture\.md)'
)
# A citation of a design note not written as docs/<name>.md.
BARE_CITATION = re.compile(r"(?<![\w./-])(?:variants|ops|architecture)\.md\b")

# The invariants docs/variants.md §6 defines, by family and count.
INVARIANTS = {"C": 10, "Q": 6, "G": 11, "E": 8}


# ----------------------------------------------------------------------------- helpers


def _text_files(*folders: str) -> dict[Path, str]:
    """{path: text} of every text file under the folders (no caches, not this file)."""
    files = {}
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts or path == Path(__file__):
                continue
            try:
                files[path] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
    return files


def _headings(doc: str) -> list[str]:
    """The headings of docs/<doc>.md, without '#' and backticks."""
    text = (DOCS / f"{doc}.md").read_text(encoding="utf-8")
    return [
        line.lstrip("#").strip().replace("`", "")
        for line in text.splitlines()
        if re.match(r"#{1,6}\s", line)
    ]


def _section_numbers(doc: str) -> set[str]:
    """"1.2", "3", ... : the numbers that open the headings of docs/<doc>.md."""
    numbers = set()
    for heading in _headings(doc):
        match = re.match(r"(\d+(?:\.\d+)*)\.?\s", heading)
        if match:
            numbers.add(match.group(1))
    return numbers


def _markdown_table(text: str, header: list[str]) -> list[list[str]]:
    """The body rows (cells stripped) of the first table whose header row is `header`."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and cells == header:
            rows = []
            for row in lines[index + 2:]:  # skip the |---| separator
                if not row.lstrip().startswith("|"):
                    break
                rows.append([cell.strip() for cell in row.strip().strip("|").split("|")])
            return rows
    raise AssertionError(f"no table with the header {header} in docs/ops.md")


def _names(cell: str) -> tuple[str, ...]:
    """`a`, `b` -> ("a", "b"); "—" -> ()."""
    return tuple(re.findall(r"`([^`]+)`", cell))


def _registered_ops() -> list[tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
    """(name, inputs, attributes, outputs) of every op the registered variants declare."""
    from attndeploy.variants.registry import variant_specs

    ops = []
    for variant in variant_specs():
        if variant.ops is None:
            continue
        for op in importlib.import_module(variant.ops).OPS:
            ops.append((op.name, op.input_names, op.attributes, op.output_names))
    return ops


# ----------------------------------------------------------------------------- ops.md


def _family_defaults(variant: str, family: str) -> dict:
    """GA-Net in the bilstm family needs the BiLSTM gate network."""
    if variant == "ganet" and family == "bilstm":
        from attndeploy.config import GANetConfig

        return {"ganet": GANetConfig(aux="bilstm")}
    return {}


def test_the_op_table_lists_exactly_the_registered_ops_with_their_signatures():
    rows = _markdown_table(
        (DOCS / "ops.md").read_text(encoding="utf-8"), ["op", "inputs", "attributes", "outputs"]
    )
    documented = [
        (_names(op)[0], _names(inputs), _names(attributes), _names(outputs))
        for op, inputs, attributes, outputs in rows
    ]
    registered = _registered_ops()
    assert [row[0] for row in documented] == [op[0] for op in registered], (
        "docs/ops.md's op table must list the registered ops, in registry order"
    )
    for doc_row, op in zip(documented, registered, strict=True):
        assert doc_row == op, f"docs/ops.md row {doc_row[0]}: documented {doc_row}, code {op}"


def test_the_op_table_agrees_with_the_export_op_set():
    from attndeploy.variants.op_registry import op_specs

    assert [spec.name for spec in op_specs()] == [op[0] for op in _registered_ops()]


def test_every_op_a_built_in_model_exports_has_a_section_in_ops_md():
    from attndeploy.config import ModelConfig
    from attndeploy.variants.registry import variant_specs

    sections = {heading for heading in _headings("ops") if heading.startswith("attndeploy::")}
    for variant in variant_specs():
        for family in variant.families:
            config = ModelConfig(vocab_size=10, num_labels=2, variant=variant.name,
                                 family=family, **_family_defaults(variant.name, family))
            for op in variant.model_ops(config):
                assert any(s.startswith(f"attndeploy::{op}:") for s in sections), (
                    f"docs/ops.md has no section `attndeploy::{op}` (variant {variant.name})"
                )


def test_ops_md_names_every_metadata_key_the_exporters_write():
    from attndeploy.config import ModelConfig
    from attndeploy.export import generic
    from attndeploy.export.exporter import ExportOptions, build_metadata

    checkpoint = SimpleNamespace(
        model_config=ModelConfig(vocab_size=10, num_labels=2), weights_sha256="0" * 64,
        label_names=("a", "b"), tokenizer=None,
    )
    keys = set(build_metadata(checkpoint, ExportOptions(), max_seq=16))
    traced = SimpleNamespace(dynamic_axes={"input_ids": {"0": "batch"}},
                             dim_bounds={"seq": (1, 16)})
    keys |= set(generic.base_metadata(18, False, traced))
    from attndeploy.runtime.names import META_PREFIX, META_QUANTIZATION

    keys.add(META_QUANTIZATION)
    text = (DOCS / "ops.md").read_text(encoding="utf-8")
    for key in sorted(keys):
        short = key.removeprefix(META_PREFIX)
        assert f"`{short}`" in text, f"docs/ops.md does not name the metadata key {key}"


# ----------------------------------------------------------------------------- citations


def _citations() -> dict[str, list[tuple[Path, str]]]:
    """Every citation of a design note under attndeploy/ and tests/, by kind."""
    found: dict[str, list[tuple[Path, str]]] = {"section": [], "invariant": [], "quoted": []}
    for path, text in _text_files("attndeploy", "tests").items():
        for doc, sections in SECTION_CITATION.findall(text):
            for number in re.findall(r"§\s?(\d+(?:\.\d+)*)", sections):
                found["section"].append((path, f"{doc} {number}"))
        for group in INVARIANT_CITATION.findall(text):
            for name in re.findall(r"[CQGE]\d+", group):
                found["invariant"].append((path, name))
        for doc, title in QUOTED_CITATION.findall(text):
            found["quoted"].append((path, f"{doc} {title}"))
        for title in NOTES_CITATION.findall(text):
            found["quoted"].append((path, f"architecture {title}"))
    return found


def test_every_cited_section_exists_in_docs():
    citations = _citations()
    assert len(citations["section"]) >= 20, "the citation scan found (almost) nothing"
    missing = []
    for path, cited in citations["section"]:
        doc, number = cited.split(" ")
        if number not in _section_numbers(doc):
            missing.append(f"{path.relative_to(ROOT)}: {doc}.md §{number}")
    for path, cited in citations["quoted"]:
        doc, title = cited.split(" ", 1)
        if not any(heading.startswith(title) for heading in _headings(doc)):
            missing.append(f'{path.relative_to(ROOT)}: {doc}.md "{title}"')
    assert not missing, "cited but not in docs/:\n" + "\n".join(sorted(set(missing)))


def test_every_cited_invariant_is_defined_in_docs_variants_md():
    text = (DOCS / "variants.md").read_text(encoding="utf-8")
    defined = set(re.findall(r"^- \*\*([CQGE]\d+)\.\*\*", text, flags=re.MULTILINE))
    expected = {f"{family}{n}" for family, count in INVARIANTS.items()
                for n in range(1, count + 1)}
    assert defined == expected
    cited = _citations()["invariant"]
    assert cited, "the citation scan found no invariant"
    missing = sorted({f"{path.relative_to(ROOT)}: {name}" for path, name in cited
                      if name not in defined})
    assert not missing, "cited invariants missing from docs/variants.md §6:\n" + "\n".join(missing)


def test_links_between_docs_resolve():
    for path in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            if "://" in target:
                continue
            assert (path.parent / target).exists(), f"{path.name}: broken link {target}"


def test_the_package_cites_docs_not_notes_outside_the_repository():
    offenders = []
    for path, text in _text_files("attndeploy").items():
        where = path.relative_to(ROOT)
        for line_no, line in enumerate(text.splitlines(), 1):
            if "../shared" in line or "shared/design" in line:
                offenders.append(f"{where}:{line_no}: {line.strip()}")
            elif BARE_CITATION.search(line):
                offenders.append(f"{where}:{line_no}: {line.strip()} (cite docs/<name>.md)")
        if re.search(r"the\s+architecture\s+notes", text):
            offenders.append(f"{where}: cites 'the architecture notes' (cite docs/architecture.md)")
    assert not offenders, "\n".join(offenders)


# ----------------------------------------------------------------------------- README session


def test_the_readme_s_typical_session_uses_real_commands_and_not_the_quickstart_s_files() -> None:
    """Its repository and files are its own, not the quickstart's (whose models would make
    `package` refuse names that exist), and every command in it is a real one. (What this
    checks: names and paths; it does not run the session.)"""
    import shlex

    from attndeploy.cli.app import COMMANDS
    from attndeploy.quickstart.options import QuickstartOptions

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("A typical session:", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line, comments=True) for line in _shell_lines(block)
                if line.startswith("attndeploy ")]
    assert [c[1] for c in commands] == ["train", "export", "validate", "package", "serve",
                                        "infer", "loadtest", "stop"]
    assert all(c[1] in COMMANDS for c in commands)
    quickstart = QuickstartOptions()
    for command in commands:
        if command[1] in ("package", "serve", "infer", "loadtest", "stop"):
            repo = Path(command[command.index("--repo") + 1])
            assert repo != quickstart.repo, command
        for arg in command[2:]:
            assert not Path(arg).is_relative_to(quickstart.workdir), command


# ------------------------------------------------------------------------ README and docs/ pages

# The pages written for users (the README and the reference moved out of it); the design notes
# keep their own line lengths.
USER_PAGES = ("README.md", "docs/README.md", "docs/cli.md", "docs/training.md", "docs/export.md",
              "docs/own-model.md", "docs/serving.md", "docs/security.md", "docs/quantize.md",
              "docs/hugging-face.md", "docs/kubernetes.md", "docs/layout.md")


def _shell_lines(block: str) -> list[str]:
    """The lines of a shell block, each continued line (`\\` at its end) joined to the next."""
    lines, current = [], ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        lines.append(current + line)
        current = ""
    if current:
        lines.append(current)
    return lines


def _attndeploy_commands() -> list[tuple[str, list[str]]]:
    """(page, words) of every `attndeploy ...` line in a bash block of README.md and docs/."""
    import shlex

    found = []
    for path in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
            for line in _shell_lines(block):
                if line.startswith("attndeploy "):
                    found.append((str(path.relative_to(ROOT)), shlex.split(line, comments=True)))
    return found


def test_every_user_page_exists_and_is_listed_in_the_docs_index():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for page in USER_PAGES:
        assert (ROOT / page).is_file(), page
        if page.startswith("docs/") and page != "docs/README.md":
            assert f"]({page.removeprefix('docs/')})" in index, f"docs/README.md omits {page}"
    for path in DOCS.glob("*.md"):
        if path.name != "README.md":
            assert f"]({path.name})" in index, f"docs/README.md omits {path.name}"


def test_the_layout_entry_for_docs_names_every_docs_page():
    layout = (DOCS / "layout.md").read_text(encoding="utf-8")
    entry = layout.split("\ndocs/", 1)[1].split("\n```", 1)[0]
    entry = re.split(r"\n\S", entry, maxsplit=1)[0]  # up to the next top-level entry
    for path in DOCS.glob("*.md"):
        assert path.name in entry, f"docs/layout.md's entry for docs/ omits {path.name}"


def test_user_pages_keep_lines_within_100_characters():
    long = [f"{page}:{number}: {len(line)} characters"
            for page in USER_PAGES
            for number, line in enumerate((ROOT / page).read_text(encoding="utf-8").splitlines(), 1)
            if len(line) > 100]
    assert not long, "\n".join(long)


def test_every_command_in_the_readme_and_docs_is_a_real_command_with_real_options():
    """Every `attndeploy` line of a bash block names a command and only options it has (old
    spellings, which warn, do not count)."""
    import typer

    from attndeploy.cli.app import app

    click_commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    commands = _attndeploy_commands()
    assert len(commands) >= 40, "the scan found (almost) no command"
    wrong = []
    for page, words in commands:
        command = click_commands.get(words[1])
        if command is None:
            wrong.append(f"{page}: no command {words[1]!r}: {' '.join(words)}")
            continue
        options = {"--help"} | {name for param in command.params
                                for name in (*param.opts, *param.secondary_opts)}
        for word in words[2:]:
            name = word.split("=", 1)[0]
            if name.startswith("--") and name not in options:
                wrong.append(f"{page}: {words[1]} has no option {name}: {' '.join(words)}")
    assert not wrong, "\n".join(wrong)


def _option_takes_value(command) -> dict[str, bool]:
    """{option name: whether it takes a value} of a click command."""
    return {name: not getattr(param, "is_flag", False) and param.nargs != 0
            for param in command.params if param.param_type_name == "option"
            for name in (*param.opts, *param.secondary_opts)}


def test_every_file_an_example_reads_under_runs_is_one_an_example_writes():
    """The examples of README.md and docs/ write under runs/ (and benchmarks/results/): each file
    or folder there that a command reads is one that some example's command writes, or that a
    shell or Python line of an example names (a redirect, an unzip), so no example reads a path
    that no step of the documented flow makes. (It does not run them.)"""
    import typer

    from attndeploy.cli.app import app

    click_commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    written = {"benchmarks/results/real_text/debian.jsonl"}  # benchmarks/real_text.py's --out
    read = []
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    for path in pages:
        for block in re.findall(r"```bash\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S):
            for line in _shell_lines(block):
                if not line.startswith("attndeploy "):
                    written.update(re.findall(r"(runs/[\w./-]+)", line))
    for page, words in _attndeploy_commands():
        takes_value = _option_takes_value(click_commands[words[1]])
        rest, index = words[2:], 0
        while index < len(rest):
            word = rest[index]
            if word == ">":  # a redirect: the rest is the file written
                written.update(rest[index + 1:])
                break
            name = word.split("=", 1)[0]
            value = None
            if name.startswith("--") and takes_value.get(name):
                value = word.split("=", 1)[1] if "=" in word else rest[index + 1]
                index += 1 if "=" in word else 2
            elif name.startswith("-"):
                index += 1
                continue
            else:
                read.append((page, word, words))
                index += 1
                continue
            if name in ("--out", "--json-out", "--plot", "--csv", "--markdown") or (
                    name == "--repo" and words[1] == "package"):
                written.add(value)
            elif name in ("--data", "--text-file", "--int8", "--hf-model", "--weights",
                          "--against", "--repo"):
                read.append((page, value, words))
    missing = [f"{page}: {target} ({' '.join(words[:3])} ...)" for page, target, words in read
               if target.startswith(("runs/", "benchmarks/results/")) and target not in written]
    assert not missing, "read but written by no example:\n" + "\n".join(missing)
