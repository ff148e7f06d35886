"""The record (``results.json``), table (``results.md``) and curves (``curves.png``) of a comparison's finished runs,
and the warning for a run that barely trained."""

from __future__ import annotations

import contextlib
import json
import math
import statistics
from pathlib import Path
from typing import Any

import timm
import torch

from ..atomic import write_json, write_text
from ..init.layer_scale import attention_layer_scale
from ..train._internal import load_images, load_model
from .arms import ALL_ARMS, PAPER_TABLE2, REFERENCE_ARMS
from .attention import attention_entropy
from .plots import save_figure
from .profiles import Profile
from .runs import RUN_RESULTS, RUN_SPECIFIC_ARGS, RUN_TIMING, flag_values, is_finished
from .stats import CLAIM_SEEDS, TIE_RULE, mean_std_text, paired_comparison

ENTROPY_IMAGES = 32  # images behind each run's attention-entropy figure in results.md
ATTENTION_ENTROPY = "attention_entropy.json"  # in a run folder: those figures, kept beside the run's results


def has_vit_attention(model: torch.nn.Module) -> bool:
    """Whether ``model`` is a timm ViT or ConViT (top-level ``patch_embed`` and ``blocks``): the models whose
    attention maps the figures and entropies read; a Swin or an MLP-Mixer is not."""
    return hasattr(model, "patch_embed") and hasattr(model, "blocks")


def trained_attention_entropy(run_dir: Path, num_images: int = ENTROPY_IMAGES) -> list[float] | None:
    """Per block, the trained model's attention entropy as a share of uniform on the first ``num_images`` images of
    the split the run was scored on (:func:`~structinit_hf.benchmark.attention.attention_entropy`): near 0 means the
    attention collapsed onto single keys. ``None`` for a model that is not a timm ViT or ConViT, or no ``final/``.

    The figures are kept in the run folder (:data:`ATTENTION_ENTROPY`), so a run's record keeps them once its weights
    are gone: a lent GPU's runs come back without ``final/``, which is larger than a call carries back."""
    run_dir = Path(run_dir)
    results = json.loads((run_dir / RUN_RESULTS).read_text())
    whose = {"images": num_images, "split": results["split"], "top1": results["top1"]}  # the figures of this run
    kept = run_dir / ATTENTION_ENTROPY
    if kept.is_file() and (record := json.loads(kept.read_text())).items() >= whose.items():
        return record["per_block"]
    if not (run_dir / "final").is_dir():
        return None
    model, *_ = load_model(str(run_dir / "final"))
    per_block = None
    if has_vit_attention(model):
        split = results["split"].split("[")[0]  # a held-out part, "train[held-out 0.1]", is read from its split
        images = load_images(results["dataset"], [model], num_images, split=split)[0]
        per_block = [round(ratio, 4) for ratio in attention_entropy(model, images)]
    with contextlib.suppress(OSError):  # a folder this process may not write to still gives its figures
        write_json(kept, {**whose, "per_block": per_block})
    return per_block


def built_layer_scale(result: dict[str, Any]) -> float | None:
    """The attention branch's layer scale (mean gamma) a run's model started with, read from a fresh build of it with
    the run's model, keywords and init (``None``: no layer scale); ``None`` too for a run that fine-tuned a checkpoint
    (``model`` a folder or a Hub id), whose gamma came from the checkpoint."""
    if not timm.is_model(result["model"]):
        return None
    with torch.random.fork_rng(devices=[]):
        model = load_model(result["model"], num_classes=result.get("num_classes"), model_kwargs=result["model_kwargs"])
    return attention_layer_scale(model.model)


def _read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _arm_record(name: str, paths: list[Path], results: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm of the benchmark record: its model and init, then per seed the scores, curve, time and entropy."""
    curves = [[m["val_top1"] for m in _read_metrics(path)] for path in paths]
    timing = [path / RUN_TIMING for path in paths]
    best = max(range(len(paths)), key=lambda i: (curves[i][-1], results[i]["top1"]))
    return {
        "description": ALL_ARMS[name].description if name in ALL_ARMS else name,
        "model": results[0]["model"],
        "model_kwargs": results[0]["model_kwargs"],
        "init": results[0]["init"],
        "attention_layer_scale": built_layer_scale(results[0]),
        "seeds": [r["args"]["seed"] for r in results],
        "final_top1": [r["top1"] for r in results],
        "final_top5": [r["top5"] for r in results],
        "val_top1": curves,
        "wall_time_s": [
            json.loads(t.read_text())["elapsed_s"] if t.is_file() else r["wall_time_s"]
            for t, r in zip(timing, results, strict=True)
        ],
        "attention_entropy": [trained_attention_entropy(path) for path in paths],
        "runs": [str(path) for path in paths],
        "best_run": str(paths[best]),
    }


def aggregate_runs(
    arm_runs: dict[str, list[Path]],
    *,
    profile: Profile,
    dataset_key: str,
    command: str = "",
    wall_clock_s: float | None = None,
    jobs: int = 1,
    study: str = "main",
) -> dict[str, Any]:
    """Collect finished runs into the benchmark record (``results.json``).

    ``arms.<arm>.final_top1`` lists one final top-1 (percent, on the evaluation split) per seed;
    ``val_top1`` one per-epoch curve per seed. ``best_run`` is the run with the highest last-epoch
    validation top-1 (held-out training images, not the test split), ties broken by the final top-1:
    the folder to publish with ``scripts/push_to_hub.py --run-dir``.
    """
    arms: dict[str, Any] = {}
    first: dict[str, Any] | None = None
    elsewhere: dict[str, list[str]] = {}  # runs whose numerics are not the first run's (another loan's GPU, say)
    for name, paths in arm_runs.items():
        missing = [str(path) for path in paths if not is_finished(path)]
        if missing:
            raise ValueError(f"arm {name!r} has unfinished runs (no {RUN_RESULTS}): {', '.join(missing)}")
        results = [json.loads((path / RUN_RESULTS).read_text()) for path in paths]
        first = first or results[0]
        arms[name] = _arm_record(name, paths, results)
        for path, result in zip(paths, results, strict=True):
            if result.get("numerics") and first.get("numerics") and result["numerics"] != first["numerics"]:
                elsewhere.setdefault(numerics_line(result["numerics"]), []).append(path.name)
    if first is None:
        raise ValueError("no runs to aggregate")
    reference = REFERENCE_ARMS[profile.family]  # each arm against timm's own init, seed by seed, by the tie rule
    top1 = {name: dict(zip(arm["seeds"], arm["final_top1"], strict=True)) for name, arm in arms.items()}
    versus = (
        {name: paired_comparison(scores, top1[reference]) for name, scores in top1.items() if name != reference}
        if reference in top1
        else {}
    )
    spec = profile.datasets[dataset_key]
    options = {key: value for key, value in first["args"].items() if key not in RUN_SPECIFIC_ARGS}
    return {
        "profile": profile.name,
        "study": study,
        "profile_notes": profile.notes,
        "dataset": spec.dataset,
        "dataset_config": spec.config,
        "dataset_hub_id": spec.hub_id,
        "split": first["split"],
        "num_eval_images": first["num_samples"],
        "command": command,
        "architecture": dict(profile.architecture),
        "recipe": dict(profile.recipe),
        "train_options": options,
        "table_epochs": list(profile.table_epochs),
        "paper_column": spec.paper_column,
        "paper_table2": {arm: row[spec.paper_column] for arm, row in PAPER_TABLE2.items() if spec.paper_column in row},
        "run_time_s": round(sum(sum(arm["wall_time_s"]) for arm in arms.values()), 1),
        "wall_clock_s": None if wall_clock_s is None else round(wall_clock_s, 1),
        "jobs": jobs,
        "versions": first["versions"],
        "numerics": first.get("numerics"),  # threads and CPU kernels (runs before 0.3 did not record them)
        **({"numerics_elsewhere": elsewhere} if elsewhere else {}),
        "arms": arms,
        "reference_arm": reference,
        "vs_default": versus,
    }


def _table(record: dict[str, Any]) -> list[str]:
    epochs, paper = record["table_epochs"], record["paper_table2"]
    head = [
        "arm",
        "init",
        *(f"val top-1 @ epoch {e}" for e in epochs),
        "val top-1, last epoch",
        f"final top-1 ({record['split']})",
        "per seed",
        "minus timm's default (paired)",
        "verdict",
        f"paper Table 2 ({record['paper_column']})",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, arm in record["arms"].items():
        curves = arm["val_top1"]
        at_epoch = [mean_std_text([c[e - 1] for c in curves]) if min(map(len, curves)) >= e else "–" for e in epochs]
        cells = [
            f"`{name}`",
            arm["description"],
            *at_epoch,
            mean_std_text([c[-1] for c in curves]),
            f"**{mean_std_text(arm['final_top1'])}**",
            ", ".join(f"{v:.2f}" for v in arm["final_top1"]),
            *versus_cells(record["vs_default"].get(name)),
            f"{paper[name]:.2f}" if name in paper else "–",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def versus_cells(versus: dict[str, Any] | None) -> tuple[str, str]:
    """The paired difference to timm's default (mean ± std over seeds) and the tie rule's verdict, for a table row;
    dashes where there is no comparison (the default itself, or no run of the default on the arm's seeds)."""
    if versus is None:
        return "–", "–"
    seeds = len(versus["seeds"])
    difference = f"{versus['mean']:+.2f}" + (f" ± {versus['std']:.2f}" if seeds > 1 else "")
    if seeds == 1:
        return difference, "one seed: no verdict"
    below = f"; {seeds} seeds, below the bar of {CLAIM_SEEDS}" if seeds < CLAIM_SEEDS else ""
    return difference, f"{versus['verdict']} (spread {versus['tolerance']:.2f}{below})"


def _target_lines(arms: dict[str, Any]) -> list[str]:
    """The target, computed from the runs: impulse 3x3 >= default + 3 and >= mimetic - 0.5 (means)."""
    if not {"impulse3", "default", "mimetic"} <= arms.keys():
        return []
    mean = {name: statistics.fmean(arms[name]["final_top1"]) for name in ("impulse3", "default", "mimetic")}
    gain, versus_mimetic = mean["impulse3"] - mean["default"], mean["impulse3"] - mean["mimetic"]
    met = gain >= 3.0 and versus_mimetic >= -0.5
    return [
        f"Impulse 3x3 minus timm default: **{gain:+.2f}** points (target: at least +3); impulse 3x3 minus mimetic: "
        f"**{versus_mimetic:+.2f}** points (target: at least -0.5). Target {'met' if met else 'not met'}.",
        "",
    ]


def _ablation_lines(record: dict[str, Any]) -> list[str]:
    """What the ablation varies, and each arm's final top-1 against the first defaults (``impulse3-v0``)."""
    if record.get("study") != "ablation":
        return []
    arms = record["arms"]
    lines = [
        "Each `impulse3-*` arm changes one setting of the first released defaults (`impulse3-v0`; `impulse3-paper` "
        "changes three, to the paper's own solve); `default`, `mimetic` and `impulse3` (the package defaults when it "
        "ran, see its `init` in `results.json`) are the main study's runs of the same seed(s). Every setting of "
        "every arm is in its `model_kwargs` below and in `results.json`.",
        "",
    ]
    if "impulse3-v0" in arms:
        base = statistics.fmean(arms["impulse3-v0"]["final_top1"])
        deltas = [f"`{name}` {statistics.fmean(arm['final_top1']) - base:+.2f}" for name, arm in arms.items()]
        lines += [f"Final top-1 minus `impulse3-v0`, in points: {', '.join(deltas)}.", ""]
    return lines


def _entropy_lines(record: dict[str, Any]) -> list[str]:
    """Each run's attention entropy after training (mean over blocks, lowest block): shows attention collapse."""
    arms = {name: arm for name, arm in record["arms"].items() if any(arm.get("attention_entropy") or [])}
    if not arms:
        return []
    lines = [
        "## Attention after training",
        "",
        f"Attention entropy of the trained model as a share of uniform, on the first {ENTROPY_IMAGES} "
        f"`{record['split']}` images: the mean over blocks, and the lowest block in brackets. 1 is uniform "
        "attention; near 0, every row attends to one key (attention entropy collapse). Per block in `results.json`.",
        "",
        "| arm | " + " | ".join(f"seed {seed}" for seed in next(iter(arms.values()))["seeds"]) + " |",
        "|---|" + "---|" * len(next(iter(arms.values()))["seeds"]),
    ]
    for name, arm in arms.items():
        cells = [
            "–" if blocks is None else f"{statistics.fmean(blocks):.2f} ({min(blocks):.2f})"
            for blocks in arm["attention_entropy"]
        ]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _duration(seconds: float | None) -> str:
    return "not recorded" if seconds is None else f"{seconds / 60:.1f} min"


def render_results_markdown(record: dict[str, Any]) -> str:
    """``results.md``: the table (mean ± std over seeds at a few epochs and at the end) beside the paper's figures,
    then the command, the recipe, the time taken, the library versions and the best run of each arm."""
    arms = record["arms"]
    num_seeds = max(len(arm["final_top1"]) for arm in arms.values())
    data = f"`{record['dataset']}`" + (f" (`{record['dataset_config']}`)" if record["dataset_config"] else "")
    study = " (ablation of the impulse settings)" if record.get("study") == "ablation" else ""
    out = [
        f"# Small-data benchmark: `{record['profile']}` profile{study}",
        "",
        f"Top-1 accuracy (%) on {data}, mean ± standard deviation over {num_seeds} seed(s). Validation: images held "
        f"out of the training split, scored after every epoch; final: the `{record['split']}` split "
        f"({record['num_eval_images']} images) after the last epoch. The paper's figures (ViT-Tiny, 200 epochs on "
        "the full dataset) are for reference: this run is much shorter and smaller.",
        "",
        *_table(record),
        "",
        f"Verdict: {TIE_RULE}",
        "",
        *(_target_lines(arms) if record.get("study", "main") == "main" else _ablation_lines(record)),
        "![validation top-1 per epoch, one line per arm](curves.png)",
        "",
        *_entropy_lines(record),
        "## Command",
        "",
        "```",
        record["command"] or "(not recorded)",
        "```",
        "",
        "Written from finished runs, training none (`--report-only`); without `--report-only`, the same command "
        "trains the runs it names that are missing."
        if record.get("report_only")
        else "Rerun the same command to resume an interrupted benchmark: finished runs are kept.",
        "",
        *_recipe_lines(record),
        *_time_and_best_run_lines(record),
    ]
    return "\n".join(out)


def _recipe_lines(record: dict[str, Any]) -> list[str]:
    """The profile's notes, the command each run is, every arm's model and kwargs, every option of the runs."""
    flags = [flag for name, value in record["recipe"].items() for flag in flag_values(name, value)]
    return [
        "## Recipe",
        "",
        record["profile_notes"],
        "",
        "Every run is `python scripts/train.py --model <arm model> --model-kwargs <arm kwargs> "
        f"--dataset {record['dataset']} {' '.join(flags)} --seed <seed> --output-dir <run>`, with:",
        "",
        *(f"- `{name}`: `{arm['model']}` `{json.dumps(arm['model_kwargs'])}`" for name, arm in record["arms"].items()),
        "",
        "<details><summary>every <code>scripts/train.py</code> option of the runs</summary>",
        "",
        "```json",
        json.dumps(record["train_options"], indent=1, sort_keys=True),
        "```",
        "",
        "</details>",
        "",
    ]


def numerics_line(numerics: dict[str, Any]) -> str:
    """``2 torch threads, AVX512 CPU kernels``: what, besides the versions, a result's numbers depend on."""
    overrides = ", ".join(f"{name}={value}" for name, value in numerics.get("code_path_variables", {}).items())
    gpu = f", {numerics['gpu']}" if numerics.get("gpu") else ""
    return (
        f"{numerics['torch_threads']} torch thread{'s' * (numerics['torch_threads'] != 1)}, "
        f"{numerics['cpu_capability']} CPU kernels{f' ({overrides})' if overrides else ''}"
        f"{f' on CPU {cpu}' if (cpu := numerics.get('cpu')) else ''}{gpu}"
    )


def _time_and_best_run_lines(record: dict[str, Any]) -> list[str]:
    """The time taken and the library versions, then each arm's best run and the command that publishes one."""
    dataset_id = f" --dataset-id {record['dataset_hub_id']}" if record["dataset_hub_id"] else ""
    return [
        "## Time and versions",
        "",
        f"- wall clock: {_duration(record['wall_clock_s'])} ({record['jobs']} run(s) at a time); sum over runs "
        f"(each including start-up and evaluation): {_duration(record['run_time_s'])}",
        "- " + ", ".join(f"{name} {version}" for name, version in record["versions"].items()),
        *([f"- {numerics_line(record['numerics'])}"] if record.get("numerics") else []),
        *(f"- {line}: {', '.join(runs)}" for line, runs in record.get("numerics_elsewhere", {}).items()),
        "",
        "## Best run of each arm (highest last-epoch validation top-1)",
        "",
        *(f"- `{name}`: `{arm['best_run']}`" for name, arm in record["arms"].items()),
        "",
        "Publish one (drop `--dry-run` to upload):",
        "",
        "```",
        f"python scripts/push_to_hub.py --run-dir <best run> --repo-id <namespace/name>{dataset_id} --dry-run",
        "```",
        "",
    ]


def plot_curves(record: dict[str, Any], path: Path) -> Path:
    """``curves.png``: validation top-1 per epoch, one line per arm (mean over seeds, band = min to max)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, arm in record["arms"].items():
        length = min(len(curve) for curve in arm["val_top1"])
        epochs = list(range(1, length + 1))
        per_epoch = [[curve[e] for curve in arm["val_top1"]] for e in range(length)]
        (line,) = ax.plot(
            epochs,
            [statistics.fmean(v) for v in per_epoch],
            marker="o",
            ms=3,
            label=f"{name}: {statistics.fmean(arm['final_top1']):.1f}%",
        )
        ax.fill_between(
            epochs, [min(v) for v in per_epoch], [max(v) for v in per_epoch], color=line.get_color(), alpha=0.15
        )
    ax.set_xlabel("epoch")
    ax.set_ylabel("validation top-1 (%)")
    ax.set_title(f"{record['profile']} profile, {Path(record['dataset']).name}: mean over seeds (band: min-max)")
    ax.grid(alpha=0.3)
    ax.legend(title=f"arm: final {record['split']} top-1", fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path


def write_outputs(record: dict[str, Any], out_dir: Path) -> None:
    """Write ``results.json``, ``results.md`` and ``curves.png`` into ``out_dir``, each atomically."""
    out_dir = Path(out_dir)
    write_json(out_dir / "results.json", record)
    plot_curves(record, out_dir / "curves.png")
    write_text(out_dir / "results.md", render_results_markdown(record))


CHANCE_SHARE = 0.95  # a final training loss above this share of chance level (ln of the class count) barely moved


def untrained_warning(run_dir: Path) -> str | None:
    """A one-line warning when a run's training loss ended near chance level (``ln(classes)``): an arm that did not
    train makes the comparison unfair, whatever its score. ``None`` when it trained."""
    losses = [json.loads(line)["train_loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    classes = json.loads((run_dir / RUN_RESULTS).read_text())["num_classes"]
    chance = math.log(classes)
    if not losses or classes < 2 or losses[-1] <= CHANCE_SHARE * chance:
        return None
    return (
        f"warning: {run_dir.name}: training loss {losses[0]:.2f} -> {losses[-1]:.2f} over {len(losses)} epoch(s), "
        f"near chance (ln {classes} = {chance:.2f}): this arm barely trained, so the comparison is not a fair one; "
        "more epochs or a lower --lr may be what it needs"
    )
