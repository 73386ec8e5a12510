"""`attndeploy train` and `attndeploy info` run as real subprocesses; tests parse `--json` output.

Errors must exit non-zero with a one-line `error (stage): message` on stderr and no traceback.
Commands run with the temporary directory as working directory and relative paths, so that the
messages stay short.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from attndeploy.checkpoint import WEIGHTS_FILE
from attndeploy.fsutil import file_sha256
from attndeploy.variants.registry import VARIANT_NAMES

TINY = ["--d-model", "16", "--heads", "2", "--layers", "2", "--d-ff", "32", "--steps", "3",
        "--batch-size", "16"]
TINY_TASK = ["--dataset", "sparse_evidence", "--n-train", "48", "--n-eval", "24", "--max-seq", "64"]


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # One intra-op thread: the runs are tiny and overlap (see tests/conftest.py).
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "attndeploy", *args], cwd=cwd, capture_output=True, text=True,
        timeout=300, env=env,
    )


def parse_json(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def assert_one_line_error(result: subprocess.CompletedProcess, stage: str, *fragments: str):
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error ({stage}): "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny GA-Net checkpoint trained through the CLI, and its --json output."""
    cwd = tmp_path_factory.mktemp("cli")
    result = run_cli("train", "--variant", "ganet", *TINY, *TINY_TASK, "--out", "ckpt", "--json",
                     "--option", "aux_hidden=8", "--option", "straight_through=true", cwd=cwd)
    return cwd, parse_json(result)


# ----------------------------------------------------------------------------- success


def test_train_json_reports_the_checkpoint_metrics_and_training_summary(trained):
    cwd, report = trained
    assert report["checkpoint"] == "ckpt"
    assert (cwd / "ckpt" / "config.json").is_file() and (cwd / "ckpt" / WEIGHTS_FILE).is_file()
    metrics = report["metrics"]
    assert 0.0 <= metrics["accuracy"] <= 1.0 and metrics["examples"] == 24
    assert {"density", "rescues", "rescue_rate"} <= set(metrics)
    assert report["training"]["steps_done"] == 3
    assert report["training"]["parameters"] > 0


def test_info_json_describes_the_trained_checkpoint(trained):
    cwd, report = trained
    info = parse_json(run_cli("info", "ckpt", "--json", cwd=cwd))
    assert info["model"]["variant"] == "ganet" and info["model"]["d_model"] == 16
    assert info["model"]["ganet"]["aux_hidden"] == 8  # --option: any field of the sub-config
    assert info["model"]["ganet"]["straight_through"] is True
    assert info["model"]["ganet"]["relaxation"] == "concrete"  # a task keeps the paper's
    assert info["model"]["ganet"]["aux"] == "mlp"  # and the per-word gate network
    assert info["labels"] == ["alpha", "bravo", "charlie", "delta"]
    assert info["metrics"] == report["metrics"]
    assert info["parameters"] == report["training"]["parameters"]
    assert info["weights_sha256"] == file_sha256(cwd / "ckpt" / WEIGHTS_FILE)
    assert info["data"]["task"] == "sparse_evidence"


def test_train_on_a_jsonl_file_with_force_replaces_an_existing_out(tmp_path):
    rows = [{"text": f"good film number {i}", "label": "pos"} for i in range(10)]
    rows += [{"text": f"bad film number {i}", "label": "neg"} for i in range(10)]
    (tmp_path / "reviews.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "old.txt").write_text("previous run")
    report = parse_json(run_cli("train", "--data", "reviews.jsonl", *TINY, "--out", "m", "--json",
                                "--force", cwd=tmp_path))
    assert not (tmp_path / "m" / "old.txt").exists()
    assert report["metrics"]["examples"] == 4  # 20% held out
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["labels"] == ["neg", "pos"] and config["data"]["data_file"] == "reviews.jsonl"
    assert config["model"]["variant"] == "standard"


def test_train_on_jsonl_reports_the_baseline_and_says_plainly_when_it_is_not_beaten(tmp_path):
    """Three steps of a tiny model cannot match naive Bayes on words that give the label away:
    train and info both say so, and the checkpoint records both accuracies."""
    rows = [{"text": f"{word} item {i}", "label": label}
            for i in range(30) for word, label in (("sunny", "good"), ("rainy", "bad"))]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    report = parse_json(run_cli("train", "--data", "d.jsonl", *TINY, "--out", "m", "--json",
                                cwd=tmp_path))
    metrics, training = report["metrics"], report["training"]
    assert metrics["baseline"] == "naive_bayes_bow" and metrics["baseline_accuracy"] == 1.0
    assert metrics["beats_baseline"] is False
    assert metrics["baseline_margin"] == pytest.approx(metrics["accuracy"] - 1.0)
    assert metrics["examples"] == 12 and training["selected_on"] == "validation"
    assert 1 <= metrics["best_step"] <= training["steps_done"] == 3
    saved = json.loads((tmp_path / "m" / "config.json").read_text())
    assert saved["metrics"] == metrics and saved["data"]["validation_examples"] == 5
    shown = run_cli("info", "m", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    flat = " ".join(shown.stdout.split())
    assert "WARNING: the model does not beat the bag-of-words baseline" in flat
    assert "metric baseline_accuracy: 1.0000" in flat


# ----------------------------------------------------------------------------- errors

# Every failing command, by name; they run concurrently once per module (`failures`), each test
# then checks its own result. Paths are relative to the run's working directory.
LONG_PATH = "a_rather_long_directory_name_" * 3 + "/checkpoint"
FAILING: dict[str, list[str]] = {
    "unknown-variant": ["train", "--variant", "flash", "--out", "m"],
    "unknown-task": ["train", "--dataset", "nope", *TINY, "--out", "m"],
    "heads": ["train", "--d-model", "30", "--heads", "4", "--out", "m"],
    "alpha": ["train", "--variant", "evolving", "--alpha", "1.5", "--out", "m"],
    "temperature": ["train", "--variant", "ganet", "--temperature", "0", "--out", "m"],
    "task-and-data": ["train", "--dataset", "sparse_evidence", "--data", "d.jsonl", "--out", "m"],
    "jsonl-without-text": ["train", "--data", "d.jsonl", *TINY, "--out", "m"],
    "missing-checkpoint": ["info", "nowhere", "--json"],
    "existing-out": ["train", *TINY, *TINY_TASK, "--out", "existing"],
    "long-message": ["info", LONG_PATH],
    "unknown-option": ["train", "--variant", "qvi", "--option", "size=3", "--out", "m"],
    "bad-option-value": ["train", "--variant", "qvi", "--option", "pairwise_chunk=x", "--out", "m"],
    "no-options": ["train", "--option", "alpha=0.1", "--out", "m"],
    "family-of-another-set": ["train", "--dataset", "tagging", "--model-family",
                              "text-classification", *TINY, "--out", "m"],
}


@pytest.fixture(scope="module")
def failures(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    cwd = tmp_path_factory.mktemp("failures")
    lines = ['{"text": "a b", "label": "x"}', "", '{"label": "y"}']
    (cwd / "d.jsonl").write_text("\n".join(lines) + "\n")
    (cwd / "existing").mkdir()
    (cwd / "existing" / "keep.txt").write_text("an earlier run")
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {name: pool.submit(run_cli, *args, cwd=cwd) for name, args in FAILING.items()}
        results = {name: future.result() for name, future in futures.items()}
    assert not (cwd / "m").exists(), "a failed train left an output directory"
    assert [p.name for p in (cwd / "existing").iterdir()] == ["keep.txt"]
    return results


def test_unknown_variant_fails_listing_the_valid_names(failures):
    result = failures["unknown-variant"]
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    flat = " ".join(result.stderr.replace("│", " ").split())
    assert f"unknown variant 'flash'; valid: {', '.join(VARIANT_NAMES)}" in flat, flat


def test_usage_errors_are_one_line_with_exit_code_2(failures):
    result = failures["unknown-variant"]
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error (usage): Invalid value for '--variant'"), lines[0]
    assert lines[0].endswith("see 'attndeploy train --help'"), lines[0]


def test_unknown_task_fails_listing_the_valid_names(failures):
    assert_one_line_error(failures["unknown-task"], "data", "unknown task 'nope'",
                          "valid: sparse_evidence, tagging")


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("heads", "d_model (30) must be divisible by n_heads (4)"),
        ("alpha", "alpha must lie in [0, 1], got 1.5"),
        ("temperature", "temperature must be > 0, got 0.0"),
        ("task-and-data", "give either --dataset or --data, not both"),
        ("unknown-option", "NAME one of form, pairwise_chunk"),
        ("bad-option-value", "pairwise_chunk: 'x' is not a int"),
        ("no-options", "variant 'standard' has no options"),
        ("family-of-another-set",
         "data set 'tagging' trains a token-classification model, not text-classification"),
    ],
)
def test_invalid_hyperparameters_fail_with_one_line(failures, name, fragment):
    assert_one_line_error(failures[name], "config", fragment)


def test_the_old_family_option_names_the_architecture_with_a_warning(tmp_path):
    """`--family` was the encoder (transformer, bilstm); it is `--architecture` now, since a
    model family is the kind of model (`--model-family`). The checkpoint keeps `family`."""
    result = run_cli("train", "--family", "bilstm", *TINY, *TINY_TASK, "--out", "m", "--json",
                     cwd=tmp_path)
    assert "--family is deprecated; use --architecture" in result.stderr
    parse_json(result)
    assert json.loads((tmp_path / "m" / "config.json").read_text())["model"]["family"] == "bilstm"


def test_a_jsonl_file_trains_the_family_its_keys_name_or_the_one_asked_for(tmp_path):
    rows = [{"text": f"{word} item {i}", "label": label}
            for i in range(12) for word, label in (("sunny", "good"), ("rainy", "bad"))]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for extra in ([], ["--model-family", "text-classification"]):
        out = f"m{len(extra)}"
        parse_json(run_cli("train", "--data", "d.jsonl", *TINY, "--out", out, "--json", *extra,
                           cwd=tmp_path))
        assert json.loads((tmp_path / out / "config.json").read_text())["model"]["head"] == (
            "classification")
    assert_one_line_error(
        run_cli("train", "--data", "d.jsonl", *TINY, "--out", "m", "--model-family",
                "token-classification", cwd=tmp_path),
        "data", "d.jsonl:1: missing 'tokens'")  # a tagger's lines are {"tokens", "tags"}


def test_a_jsonl_line_without_text_names_its_line(failures):
    assert_one_line_error(failures["jsonl-without-text"], "data", "d.jsonl:3: missing 'text'")


def test_an_existing_out_is_refused_without_force_and_left_untouched(failures):
    assert_one_line_error(failures["existing-out"], "checkpoint",
                          "existing already exists; pass --force to replace it")


def test_a_missing_checkpoint_fails_with_one_line(failures):
    result = failures["missing-checkpoint"]
    assert_one_line_error(result, "checkpoint", "nowhere does not exist")
    assert result.stdout == ""


def test_a_long_error_message_stays_on_one_line(failures):
    """rich must not wrap it at the 80 columns it assumes when stderr is not a terminal."""
    assert_one_line_error(failures["long-message"], "checkpoint", "does not exist")


# ------------------------------------------------------------------- output checked up front


@pytest.mark.parametrize("out, fragment", [
    ("/proc/attndeploy-ckpt", "/proc is not writable"),
    ("a_file", "it is a file, not a folder"),
    ("a_file/ckpt", "a_file is not a folder"),
    ("c" * 300, "characters; keep it under"),
])
def test_an_unusable_out_is_refused_before_loading_data_or_training(
    monkeypatch, capsys, tmp_path, out, fragment
):
    """In process: the data loader is replaced by one that fails the test if it is reached."""
    from attndeploy import train
    from attndeploy.cli import app as cli_app

    def never(**kwargs):
        raise AssertionError("the data was loaded although --out is unusable")

    monkeypatch.setattr(train, "load_training_data", never)
    monkeypatch.setattr(train, "train_checkpoint", never)
    (tmp_path / "a_file").write_text("not a checkpoint")
    target = out if out.startswith("/") else str(tmp_path / out)
    monkeypatch.setattr("sys.argv", ["attndeploy", "train", *TINY, *TINY_TASK, "--out", target,
                                     "--force"])
    with pytest.raises(SystemExit) as info:
        cli_app.main()
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 1 and len(err) == 1, err
    assert err[0].startswith("error (output): cannot write") and fragment in err[0], err[0]
    assert (tmp_path / "a_file").read_text() == "not a checkpoint"


def test_train_prints_the_best_epoch_the_density_against_its_target_and_the_verdict(tmp_path):
    from attndeploy.cli.train import summary_lines

    metrics = {"accuracy": 0.61, "loss": 1.2, "density": 0.31, "density_target": 0.3,
               "baseline_accuracy": 0.64, "beats_baseline": False}
    training = {"seconds": 12.5, "best_epoch": 4.0, "best_step": 400, "epochs_done": 8.0,
                "selected_on": "validation", "stopped_by": "patience"}
    text = summary_lines(tmp_path / "m", metrics, training)
    assert "held-out accuracy 0.6100" in text and "baseline_accuracy 0.6400" in text
    assert "best at epoch 4 (step 400) of 8, chosen on the validation set" in text
    assert "gate density 0.310 (above its target of at most 0.3)" in text
    metrics["density"] = 0.073
    assert "gate density 0.073 (within its target of at most 0.3)" in summary_lines(
        tmp_path / "m", metrics, training)
    assert "WARNING: the model does not beat the bag-of-words baseline" in text


def test_train_says_when_the_saved_model_was_refit_on_training_and_validation(tmp_path):
    from attndeploy.cli.train import summary_lines

    metrics = {"accuracy": 0.7, "loss": 1.0}
    training = {"seconds": 30.0, "best_epoch": 4.0, "best_step": 400, "epochs_done": 8.0,
                "selected_on": "validation", "stopped_by": "patience",
                "refit": {"epochs": 6, "examples": 3620, "steps_done": 684,
                          "stopped_by": "epochs", "seconds": 14.0}}
    text = " ".join(summary_lines(tmp_path / "m", metrics, training).split())
    assert ("best at epoch 4 (step 400) of 8, chosen on the validation set; stopped by patience "
            "then refit on training + validation (3620 examples) for 6 epochs; this is the "
            "model saved") in text
    training["refit"] = {"skipped": "the time budget was spent on selection"}
    text = " ".join(summary_lines(tmp_path / "m", metrics, training).split())
    assert "the time budget was spent on selection: no refit" in text


def test_refit_is_refused_for_a_hugging_face_model(tmp_path):
    result = run_cli("train", "--hf-model", "bert", "--data", "d.jsonl", "--refit",
                     "--out", "m", cwd=tmp_path)
    assert_one_line_error(result, "config", "--refit applies to the built-in models")
    assert not (tmp_path / "m").exists()


def test_distillation_is_refused_for_a_variant_without_gates(tmp_path):
    rows = [{"text": f"{word} item {i}", "label": label}
            for i in range(10) for word, label in (("sunny", "good"), ("rainy", "bad"))]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    result = run_cli("train", "--data", "d.jsonl", "--variant", "standard", "--distill", "0.5",
                     *TINY, "--out", "m", cwd=tmp_path)
    assert_one_line_error(result, "config", "applies to gated variants (GA-Net), not 'standard'")
    assert not (tmp_path / "m").exists()


def test_train_says_how_far_calibration_moved_the_gate_threshold(tmp_path):
    from attndeploy.cli.train import summary_lines

    metrics = {"accuracy": 0.61, "loss": 1.2, "density": 0.38, "density_target": 0.3}
    training = {"seconds": 12.5, "best_epoch": 4.0, "best_step": 400, "epochs_done": 8.0,
                "selected_on": "validation", "stopped_by": "patience",
                "gate_calibration": {"gate_shift": 0.62, "density_before": 0.291,
                                     "density_after": 0.37}}
    text = " ".join(summary_lines(tmp_path / "m", metrics, training).split())
    assert ("gate density 0.380 (above its target of at most 0.3, threshold moved by +0.62 "
            "from 0.291 on the validation set)") in text
    assert "dense-gate run" not in text
    training["teacher"] = {"accuracy": 0.6533, "seconds": 4.25, "weight": 0.5}
    text = " ".join(summary_lines(tmp_path / "m", metrics, training).split())
    assert ("learnt from its dense-gate run too (held-out accuracy 0.6533, 4.2 s, weight 0.5)"
            in text)


def test_train_says_when_no_selection_was_made_and_where_calibration_read(tmp_path):
    """A fixed number of epochs (the pretrained recipe) keeps the last model: no "None set";
    calibration without a validation split reads the training texts, and says so."""
    from attndeploy.cli.train import summary_lines

    metrics = {"accuracy": 0.83, "loss": 0.6, "density": 0.34, "density_target": 0.45}
    training = {"seconds": 400.0, "best_epoch": 4.0, "best_step": 416, "epochs_done": 4.0,
                "selected_on": None, "stopped_by": "epochs",
                "gate_calibration": {"gate_shift": -0.1, "density_before": 0.47,
                                     "density_after": 0.45, "on": "training"}}
    text = " ".join(summary_lines(tmp_path / "m", metrics, training).split())
    assert "None" not in text
    assert "the model after 4 epochs (step 416), no selection; stopped by epochs" in text
    assert "from 0.470 on the training set" in text

def test_ganet_on_jsonl_calibrates_its_gates_and_trains_hard_concrete_bilstm_gates_unless_told(
        tmp_path):
    rows = [{"text": f"{word} item number {i} today", "label": label}
            for i in range(30) for word, label in (("sunny", "good"), ("rainy", "bad"))]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    runs = {}
    for name, extra in (("default", []),
                        ("off", ["--density-calibrate", "0", "--relaxation", "concrete",
                                 "--aux", "mlp"])):
        runs[name] = parse_json(run_cli("train", "--data", "d.jsonl", "--variant", "ganet", *TINY,
                                        "--out", name, "--json", *extra, cwd=tmp_path))
    calibration = runs["default"]["training"]["gate_calibration"]
    assert calibration["density_after"] <= 0.37 and calibration["gate_shift"] != 0.0
    assert "gate_calibration" not in runs["off"]["training"]
    ganet = {name: json.loads((tmp_path / name / "config.json").read_text())["model"]["ganet"]
             for name in runs}
    assert {name: ganet[name]["relaxation"] for name in runs} == {"default": "hard_concrete",
                                                                   "off": "concrete"}
    assert {name: ganet[name]["aux"] for name in runs} == {"default": "bilstm", "off": "mlp"}
    assert runs["default"]["training"]["config"]["word_dropout"] == 0.0  # GA-Net's own preset
    assert runs["default"]["training"]["config"]["distill"] == 0.5  # from its dense-gate run
    assert runs["default"]["training"]["teacher"]["weight"] == 0.5
