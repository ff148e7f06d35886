"""``structinit-hf compare`` and the command dispatcher a pip install brings."""

from __future__ import annotations

import configparser
import json
import runpy
import sys
from pathlib import Path

import pytest

from structinit_hf.__main__ import COMMANDS, main
from structinit_hf.benchmark import CompareSettings, compare_inits
from structinit_hf.benchmark.stats import paired_comparison

REPO = Path(__file__).resolve().parents[1]
TINY = ["--epochs", "1", "--max-train-samples", "64", "--batch-size", "32", "--model-kwargs", "depth=1"]


@pytest.mark.slow
def test_compare_trains_each_init_on_each_seed_and_prints_what_it_writes(tmp_path, capsys):
    out = tmp_path / "cmp"
    recipe = ["--aa", "rand-m9-mstd0.5", "--mixup", "0.8", "--cutmix", "1.0"]  # the user's own augmentation
    status = main(
        ["compare", "--arms", "default", "impulse3", "--seeds", "0", "1", *TINY, *recipe, "--output-dir", str(out)]
    )
    printed = capsys.readouterr().out
    assert status == 0
    record = json.loads((out / "results.json").read_text())
    assert set(record["top1"]) == {"default", "impulse3"} and record["seeds"] == [0, 1]
    for arm in ("default", "impulse3"):  # each run is its own folder, trained on the requested images and seed
        for seed in (0, 1):
            run = json.loads((out / f"{arm}-seed{seed}" / "results.json").read_text())
            assert run["args"]["seed"] == seed and run["train_images"] == 64
            assert (run["args"]["aa"], run["args"]["mixup"], run["args"]["cutmix"]) == ("rand-m9-mstd0.5", 0.8, 1.0)
            assert record["top1"][arm][str(seed)] == run["top1"]
    versus = record["vs_default"]["impulse3"]
    top1 = {arm: {int(seed): value for seed, value in scores.items()} for arm, scores in record["top1"].items()}
    assert versus == json.loads(json.dumps(paired_comparison(top1["impulse3"], top1["default"])))
    differences = [top1["impulse3"][seed] - top1["default"][seed] for seed in (0, 1)]
    assert [versus["per_seed"][str(seed)] for seed in (0, 1)] == pytest.approx(differences, abs=1e-4)
    row = next(line for line in printed.splitlines() if line.startswith("| impulse 3x3"))
    assert f"{versus['mean']:+.2f}" in row and versus["verdict"] in row
    assert "64 training images, 1 epoch, seeds 0, 1; top-1 on the 1,000 images of test" in printed
    assert (out / "curves.png").stat().st_size > 0 and (out / "compare.md").read_text() in printed


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--arms", "default", "impulse7"], "--arms impulse7: unknown arm; allowed (--family vit): default,"),
        (["--seeds", "-1"], "--seeds -1: out of range; allowed: integers >= 0"),
        (["--arms", "default", "default"], "--arms default default: arm default given more than once; name each arm"),
        (["--seeds", "0", "1", "0"], "--seeds 0 1 0: seed 0 given more than once; name each seed once"),
        (["--lr", "0"], "--lr 0: out of range; allowed: a number between 0 and 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(argv, message, capsys):
    assert main(["compare", *argv]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: ") and message in errors[0], errors


@pytest.mark.filterwarnings("ignore:'structinit_hf.__main__' found in sys.modules")  # imported above, run again
def test_python_m_lists_the_commands_and_setup_declares_the_console_script(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["structinit_hf", "--help"])
    with pytest.raises(SystemExit) as stop:  # what ``python -m structinit_hf --help`` runs, in this process
        runpy.run_module("structinit_hf", run_name="__main__", alter_sys=True)
    printed = capsys.readouterr().out
    assert stop.value.code == 0 and all(command in printed for command in COMMANDS)
    assert main(["no-such-command"]) == 2
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    assert config["options.entry_points"]["console_scripts"].strip() == "structinit-hf = structinit_hf.__main__:main"


def test_the_log_counts_what_the_table_counts(tmp_path, monkeypatch, capsys):
    """Catches datasets' "Generating train split: 2560 examples" (the rows it caches, printed on a fresh cache) as the
    only count in the log while the table says 2,500 training images: one line of compare's says both."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path))  # fresh: datasets would count rows
    profile = compare_inits._profile(CompareSettings())
    captured = capsys.readouterr()
    assert captured.out == (
        "cifar10-sample: 2,560 training rows, 2,500 used (--max-train-samples), 1,000 test rows scored\n"
    )
    assert "Generating" not in captured.err and "2560" not in captured.err, captured.err
    assert profile.recipe["max_train_samples"] == 2500 and datasets.is_progress_bar_enabled()


@pytest.mark.slow  # two comparisons of three tiny runs: about a minute
def test_the_same_compare_prints_the_same_table_whatever_the_machines_thread_count(tmp_path, capsys):
    """Catches a comparison that does not reproduce on the same kind of CPU: torch's thread count (by default the
    machine's cores) orders its float sums, and on one machine compare's mimetic arm printed 31.80, 33.10 and 31.50
    top-1 under 1, 2 and 4 threads (docs/benchmarks.md). compare pins the count: started under 1 and under 3 threads,
    both comparisons train the same bits, print the same table, and say under which threads and CPU."""
    import hashlib

    import torch

    tiny = ["--epochs", "1", "--max-train-samples", "96", "--batch-size", "32", "--model-kwargs", "depth=1"]
    printed, weights = [], []
    before = torch.get_num_threads()
    try:
        for threads, out in ((1, tmp_path / "a"), (3, tmp_path / "b")):
            torch.set_num_threads(threads)  # another machine's default
            assert main(["compare", *tiny, "--output-dir", str(out)]) == 0
            assert torch.get_num_threads() == threads  # given back as it was
            printed.append(capsys.readouterr().out.replace(str(out), "OUT"))
            weights.append({run.parent.parent.name: hashlib.sha256(run.read_bytes()).hexdigest()
                            for run in sorted(out.glob("*/final/model.safetensors"))})  # fmt: skip
    finally:
        torch.set_num_threads(before)
    assert len(weights[0]) == 3 and weights[0] == weights[1]
    assert printed[0] == printed[1]
    record = json.loads((tmp_path / "a" / "results.json").read_text())
    assert record["numerics"]["torch_threads"] == compare_inits.THREADS == 2
    precision = "bf16 autocast" if CompareSettings().resolved_precision() == "bf16" else "fp32"
    assert record["recipe"]["mixed_precision"] == ("bf16" if precision != "fp32" else "no")
    assert (
        f"(torch {torch.__version__}, {precision}, 2 torch threads, {torch.backends.cpu.get_cpu_capability()} CPU "
        "kernels" in printed[0]
    )
    # the log's count of the data and the table's agree
    assert "cifar10-sample: 2,560 training rows, 96 used (--max-train-samples), 1,000 test rows scored" in printed[0]
    assert "96 training images, 1 epoch, seed 0; top-1 on the 1,000 images of test" in printed[0]


def test_compare_trains_in_bf16_where_the_device_computes_it_natively(monkeypatch, capsys):
    """Catches --mixed-precision auto left at fp32 on a CPU with AVX512-BF16 or AMX (the step is 2.4x slower there:
    docs/benchmarks.md, "The CPU step"), bf16 forced onto a CPU without them, an explicit choice overridden, and a
    precision the runs cannot take let through."""
    from structinit_hf.train import _internal

    for native, resolved in ((True, "bf16"), (False, "no")):
        monkeypatch.setattr(_internal, "native_bf16", lambda device, native=native: native, raising=False)
        assert CompareSettings().resolved_precision() == resolved
        assert compare_inits._profile(CompareSettings()).recipe["mixed_precision"] == resolved
        for explicit in ("no", "bf16"):
            assert CompareSettings(mixed_precision=explicit).resolved_precision() == explicit
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        main(["compare", "--mixed-precision", "fp16"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "--mixed-precision: invalid choice: 'fp16'" in error and "'auto', 'bf16', 'no'" in error
    with pytest.raises(ValueError, match="--mixed-precision fp16: not one of auto, bf16, no"):
        compare_inits.compare(CompareSettings(mixed_precision="fp16"))


def test_the_readme_shows_the_committed_compare_output():
    """The README's table is the one `study/benchmark_compare.sh` recorded with the torch a fresh install gets."""
    committed = (REPO / "study/records/compare/torch-2.14.1-amd-zen5/output.md").read_text().splitlines()
    readme = (REPO / "README.md").read_text()
    rows = [line for line in committed if line.startswith("| ")]
    assert len(rows) == 4 and all(row in readme for row in rows)
    assert committed[1] in readme  # the heading: images, epochs, seed, scored split


def test_an_arm_whose_loss_stayed_near_chance_is_warned(tmp_path):
    from structinit_hf.benchmark.summary import untrained_warning

    def run(name: str, losses: list[float]) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "metrics.jsonl").write_text("".join(json.dumps({"train_loss": v}) + "\n" for v in losses))
        (folder / "results.json").write_text(json.dumps({"num_classes": 10}))
        return folder

    stalled = untrained_warning(run("mimetic-seed0", [2.32, 2.30, 2.33, 2.28, 2.27]))  # ln 10 = 2.30
    assert stalled.startswith("warning: mimetic-seed0: training loss 2.32 -> 2.27 over 5 epoch(s), near chance")
    assert untrained_warning(run("default-seed0", [2.28, 2.15, 1.98])) is None
    assert untrained_warning(run("shift-seed0", [2.32, 2.17])) is None  # 0.94 of chance: moving


@pytest.mark.parametrize(
    ("argv", "lr"),
    [
        ([], 1e-3),  # width 48, 3 heads: head dim 16, the README's comparison
        (["--model-kwargs", "embed_dim=96"], 3e-4),  # head dim 32: shift trains slowly and unsteadily at 1e-3
        (["--model-kwargs", "embed_dim=192"], 3e-4),  # head dim 64, ViT-Tiny's: mimetic and shift stall at 1e-3
        (["--model-kwargs", "embed_dim=96", "num_heads=6"], 1e-3),  # head dim 16 again
        (["--model-kwargs", "embed_dim=192", "--lr", "1e-3"], 1e-3),  # an explicit rate wins
    ],
)
def test_the_learning_rate_follows_the_head_dimension(argv, lr, capsys):
    settings = CompareSettings(**vars(compare_inits.compare_parser().parse_args(argv)))
    profile = compare_inits._profile(settings)
    assert profile.recipe["lr"] == lr
    assert f"--lr {lr}" in compare_inits._command(settings, Path("out"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "family, model_kwargs, arms",
    [
        ("swin", ["depths=(1, 1)"], ["swin-default", "swin-mimetic", "swin-impulse3"]),
        ("mixer", ["num_blocks=1"], ["mixer-default", "mixer-impulse3"]),
    ],
)
def test_compare_family_trains_that_architectures_arms_against_its_default(
    tmp_path, capsys, family, model_kwargs, arms
):
    """``--family``: the arms default to the family's, are built at its proxy geometry, and are compared with the
    family's timm default."""
    out = tmp_path / family
    tiny = ["--epochs", "1", "--max-train-samples", "64", "--batch-size", "32", "--model-kwargs", *model_kwargs]
    assert main(["compare", "--family", family, *tiny, "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    record = json.loads((out / "results.json").read_text())
    assert list(record["top1"]) == arms
    assert set(record["vs_default"]) == set(arms[1:])
    run = json.loads((out / f"{arms[-1]}-seed0" / "results.json").read_text())
    assert run["model"] == compare_inits.ALL_ARMS[arms[-1]].model and run["init"]["family"] == family
    assert run["model_kwargs"]["img_size"] == 16 and run["args"]["lr"] == 1e-3
    assert "| " + compare_inits.arm_label(arms[-1]) in printed


def test_compare_family_refuses_another_architectures_arms(capsys):
    assert main(["compare", "--family", "mixer", "--arms", "mixer-default", "impulse3"]) == 2
    assert "--arms impulse3: not mixer arms (--family mixer); allowed: mixer-default, mixer-impulse3" in (
        capsys.readouterr().err
    )


def test_compare_family_names_its_own_arms_and_model_keywords(tmp_path, capsys):
    """Catches --family mixer answered with the ViT arms as the allowed ones, and with a keyword list that lacks the
    Mixer's own (num_blocks, img_size: its builder passes them on to timm's MlpMixer)."""
    assert main(["compare", "--family", "mixer", "--arms", "mixer-mimetic"]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == "error: --arms mixer-mimetic: unknown arm; allowed (--family mixer): mixer-default, mixer-impulse3"
    argv = ["compare", "--family", "mixer", "--model-kwargs", "num_block=2", "--output-dir", str(tmp_path / "c")]
    assert main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "unknown model keyword 'num_block' for mixer_s4_32 (did you mean 'num_blocks'?)" in error, error
    assert all(f" {name}," in error for name in ("img_size", "embed_dim", "patch_size", "kernel_size")), error
    assert not (tmp_path / "c").exists()  # refused before training: no folder left


def test_a_refused_compare_leaves_no_folder(tmp_path, monkeypatch, capsys):
    """Catches compare refusing --epochs 0 (as its first run starts) but leaving the comparison folder and an empty
    run folder behind, there or under the default runs/."""
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "--epochs", "0", "--max-train-samples", "20"]) == 2
    assert "--epochs 0 (epochs=0): out of range" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
