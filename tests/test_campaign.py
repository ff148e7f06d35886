"""The campaign report's pure computations on a tiny fake record: merging, paired differences, the tie rule."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from structinit_hf.benchmark.stats import decide, paired_comparison, paired_differences, spread
from study.campaign import records, sources
from study.campaign.records import build_campaign, build_width
from study.campaign.scores import merge_scores
from study.campaign.sources import WidthSetting
from study.campaign.tables import render_campaign_markdown, width_markdown

REPO = Path(__file__).resolve().parents[1]
REPORT = REPO / "study/records/small_data/campaign/results.md"


def _record(arms: dict[str, dict[int, float]]) -> dict:
    return {
        "arms": {
            name: {"seeds": list(per_seed), "final_top1": list(per_seed.values())} for name, per_seed in arms.items()
        }
    }


def test_merge_maps_old_names_and_joins_seeds():
    old = _record({"default": {0: 50.0, 1: 51.0}, "impulse3-shift": {0: 55.0, 1: 56.0}})
    new = _record({"default": {2: 52.0}, "impulse3": {2: 57.0}})
    scores = merge_scores([old, new])
    assert scores == {"default": {0: 50.0, 1: 51.0, 2: 52.0}, "impulse3": {0: 55.0, 1: 56.0, 2: 57.0}}


def test_merge_refuses_two_figures_for_one_run():
    with pytest.raises(ValueError, match="recorded twice"):
        merge_scores([_record({"default": {0: 50.0}}), _record({"default": {0: 50.5}})])


def test_paired_differences_use_common_seeds_only():
    paired = paired_differences({0: 55.0, 1: 57.0, 2: 56.0}, {0: 50.0, 1: 54.0})
    assert paired["seeds"] == [0, 1]
    assert paired["per_seed"] == {0: 5.0, 1: 3.0}
    assert paired["mean"] == pytest.approx(4.0)
    assert paired["std"] == pytest.approx(2**0.5, abs=1e-4)
    assert (paired["min"], paired["max"]) == (3.0, 5.0)
    assert paired_differences({0: 1.0}, {1: 1.0}) is None


def test_spread():
    s = spread([1.0, 2.0, 4.0])
    assert (s["n"], s["min"], s["max"], s["range"]) == (3, 1.0, 4.0, 3.0)
    assert s["mean"] == pytest.approx(7 / 3, abs=1e-4)
    assert spread([3.0])["std"] == 0.0


def test_tie_rule():
    assert decide([2.0, 3.0, 2.5], tolerance=1.0) == "ahead"
    assert decide([-2.0, -3.0, -2.5], tolerance=1.0) == "behind"
    assert decide([2.0, 3.0, 2.5], tolerance=3.0) == "tie"  # mean inside the seed spread
    assert decide([2.0, 3.0, -0.1], tolerance=0.5) == "tie"  # not ahead on every seed
    assert decide([5.0], tolerance=0.0) == "no verdict"


def test_compare_judges_against_the_wider_arm_spread():
    arm = {0: 57.2, 1: 57.8, 2: 57.0}  # range 0.8
    default = {0: 53.5, 1: 55.1, 2: 54.0}  # range 1.6
    mimetic = {0: 56.6, 1: 55.6, 2: 56.9}  # range 1.3
    ahead = paired_comparison(arm, default)
    assert ahead["tolerance"] == pytest.approx(1.6)
    assert ahead["verdict"] == "ahead"
    tie = paired_comparison(arm, mimetic)  # +0.6, +2.2, +0.1: mean 0.97 < 1.3
    assert tie["verdict"] == "tie"


def test_build_and_render_on_a_fake_tree(tmp_path, monkeypatch):
    paths = {
        "a.json": _record({"default": {0: 30.0, 1: 31.0, 2: 30.5}, "mimetic": {0: 35.0, 1: 36.0, 2: 35.2}}),
        "b.json": _record({"default": {0: 50.0, 1: 51.0}, "impulse3-shift": {0: 51.0, 1: 50.5}}),
        "long.json": _record({"default": {0: 40.0, 1: 41.0}, "mimetic": {0: 41.0, 1: 41.5}}),
    }
    for name, record in paths.items():
        (tmp_path / name).write_text(json.dumps(record))
    monkeypatch.setattr(records, "SIZE_SOURCES", {2_500: ("a.json",), 25_000: ("b.json", "missing.json")})
    monkeypatch.setattr(records, "LENGTH_SOURCES", {10: ("a.json",), 50: ("long.json",)})
    record = build_campaign(tmp_path)
    small = record["sizes"]["2500"]
    assert small["vs"]["default"]["mimetic"]["verdict"] == "ahead"
    assert small["not_run"] == ["impulse3", "convit"]  # ConViT has a row beside the inits at 2,500 and 5,000
    assert {k: small["best"][k] for k in ("arm", "tied", "behind")} == {
        "arm": "mimetic",
        "tied": [],
        "behind": ["default"],
    }
    assert small["best"]["vs"]["default"]["per_seed"] == {0: -5.0, 1: -5.0, 2: pytest.approx(-4.7)}
    big = record["sizes"]["25000"]
    assert big["sources"] == ["b.json"]
    assert big["vs"]["default"]["impulse3"]["verdict"] == "tie"  # +1.0, -0.5
    assert record["lengths"]["long_minus_short"]["default"]["per_seed"] == {0: 10.0, 1: 10.0}
    assert record["lengths"]["10"]["arms"]["default"]["n"] == 2  # judged on the long runs' seeds
    text = render_campaign_markdown(record)
    assert "not run (time)" in text and "Tie rule" in text
    assert (
        "Each init minus it, paired on the seed: timm's default (trunc normal) -4.90 (-5.00, -5.00, -4.70): behind"
        in text
    )


def test_a_size_gathers_every_batch_folder_its_pattern_matches(tmp_path, monkeypatch):
    """Catches a batch of runs written to its own folder (seed2-impulse3/, seed1/) that the report does not read."""
    batches = {
        "n/results.json": {"default": {0: 50.0}, "impulse3": {0: 52.0}},
        "n/seed1/results.json": {"default": {1: 51.0}, "impulse3": {1: 53.5}},
        "n/seed2-impulse3/results.json": {"impulse3": {2: 52.5}},
        "n/seed2-default/results.json": {"default": {2: 50.5}},
    }
    for name, arms in batches.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(json.dumps(_record(arms)))
    monkeypatch.setattr(records, "SIZE_SOURCES", {5_000: ("n/results.json", "n/seed*/results.json")})
    monkeypatch.setattr(records, "LENGTH_SOURCES", {10: ("n/results.json",), 50: ("none/seed*/results.json",)})
    size = build_campaign(tmp_path)["sizes"]["5000"]
    assert size["sources"] == [
        "n/results.json", "n/seed1/results.json", "n/seed2-default/results.json", "n/seed2-impulse3/results.json"
    ]  # fmt: skip
    assert size["vs"]["default"]["impulse3"]["per_seed"] == {0: 2.0, 1: 2.5, 2: 2.0}


def test_the_committed_report_is_the_committed_records():
    """Catches a batch of runs committed without rerunning study/campaign_report.py (a stale results.md)."""
    assert render_campaign_markdown(build_campaign(REPO)) == REPORT.read_text()


def test_the_headline_rows_are_rows_of_the_report():
    """docs/campaign.md's headline table is a copy of report rows, so it cannot drift from the committed records."""
    readme = (REPO / "docs" / "campaign.md").read_text()
    section = readme[readme.index("<!-- headline: rows of") : readme.index("<!-- end of headline -->")]
    rows = [line for line in section.splitlines() if line.startswith("|") and not line.startswith("|---")][1:]
    assert len(rows) >= 2  # mimetic and impulse 3x3
    report_rows = set(REPORT.read_text().splitlines())
    assert [row for row in rows if row not in report_rows] == []


def test_convit_runs_at_the_width_of_the_vit_arms():
    """timm's ConViT multiplies embed_dim by num_heads: under a profile that sets the ViT width it gets it per head."""
    import timm

    from structinit_hf.benchmark.arms import ARMS
    from structinit_hf.benchmark.profiles import arm_model_kwargs
    from study.profiles import PROFILES

    for name in ("cpu-proxy-n2500", "cpu-proxy-n5000"):
        profile = PROFILES[name]
        kwargs = arm_model_kwargs(ARMS["convit"], profile)
        assert (kwargs["embed_dim"], kwargs["num_heads"], kwargs["local_up_to_layer"]) == (16, 3, 10)
        vit = arm_model_kwargs(ARMS["default"], profile)
        assert vit["embed_dim"] == 48
        small = {**kwargs, "depth": 2, "local_up_to_layer": 1}
        assert timm.create_model(ARMS["convit"].model, **small).embed_dim == vit["embed_dim"]
    assert "embed_dim" not in arm_model_kwargs(ARMS["convit"], PROFILES["cifar10"])  # ConViT-Tiny's own 48 x 4


def _regime_tree(tmp_path, monkeypatch, regimes: dict[str, dict[str, dict[int, float]]], options=None):
    """A fake tree with one record per regime (train options in ``options``); the report reads only these."""
    patterns = {}
    for key, arms in regimes.items():
        path = tmp_path / key / "results.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({**_record(arms), "train_options": (options or {}).get(key, {})}))
        patterns[key] = (sources.REGIMES[key][0], (f"{key}/results.json",))
    monkeypatch.setattr(records, "SIZE_SOURCES", {5_000: patterns["crop-flip"][1]})
    monkeypatch.setattr(records, "LENGTH_SOURCES", {10: ("none.json",), 50: ("none.json",)})
    monkeypatch.setattr(records, "REGIMES", patterns)
    return build_campaign(tmp_path)


def test_the_regime_tables_are_rendered_from_the_records(tmp_path, monkeypatch):
    """Catches a regime whose rows, gain over timm's default or verdict are not computed from its own records."""
    record = _regime_tree(
        tmp_path,
        monkeypatch,
        {
            "crop-flip": {"default": {0: 30.0, 1: 31.0, 2: 30.5}, "impulse3": {0: 36.0, 1: 37.0, 2: 36.5}},
            "randaug": {"default": {0: 33.0, 1: 33.5, 2: 32.0}, "impulse3": {0: 33.5, 1: 33.0, 2: 33.0}},
            "mixcut": {"default": {0: 25.0, 1: 26.0, 2: 25.5}, "impulse3": {0: 30.0, 1: 30.5, 2: 31.0}},
        },
        {"randaug": {"aa": "rand-m9-mstd0.5", "mixup": 0.0}, "mixcut": {"aa": "none", "mixup": 0.8, "cutmix": 1.0}},
    )
    aug = record["augmentation"]
    assert aug["regimes"]["randaug"]["vs"]["default"]["impulse3"]["verdict"] == "tie"  # +0.5, -0.5, +1.0
    assert aug["regimes"]["mixcut"]["vs"]["default"]["impulse3"]["verdict"] == "ahead"  # +5.0, +4.5, +5.5
    assert aug["regimes"]["randaug"]["seed_spread"]["largest"] == 1.5
    assert aug["minus_reference"]["mixcut"]["default"]["per_seed"] == {0: -5.0, 1: -5.0, 2: -5.0}
    text = render_campaign_markdown(record)
    assert "| timm's default (trunc normal) | 30.50 ± 0.50 (30.00, 31.00, 30.50) | 32.83 ± 0.76" in text
    assert "| impulse 3x3, `shift` (default) | +6.00 ± 0.00 (+6.00, +6.00, +6.00): ahead (spread 1.00) | " in text
    assert "+0.33 ± 0.76 (+0.50, -0.50, +1.00): tie (spread 1.50) | +5.00 ± 0.50 (+5.00, +4.50, +5.50): ahead" in text
    assert "| seed spread: largest range of one init | 1.00 | 1.50 | 1.00 |" in text
    assert "Recorded train options: `aa`=rand-m9-mstd0.5, `mixup`=0.0" in text
    assert "below the bar" not in text


def test_a_regime_with_fewer_than_three_seeds_is_marked(tmp_path, monkeypatch):
    """Catches a regime shown with two seeds as if it carried an accuracy claim."""
    record = _regime_tree(
        tmp_path,
        monkeypatch,
        {
            "crop-flip": {"default": {0: 30.0, 1: 31.0, 2: 30.5}, "impulse3": {0: 36.0, 1: 37.0, 2: 36.5}},
            "randaug": {"default": {0: 30.0, 1: 30.2}, "impulse3": {0: 35.0, 1: 35.5}},
            "mixcut": {"default": {0: 25.0}, "impulse3": {0: 30.0}},
        },
    )
    assert [r["below_claim"] for r in record["augmentation"]["regimes"].values()] == [False, True, True]
    text = render_campaign_markdown(record)
    assert "### RandAugment m9 (fewer than 3 seeds for some init: below the bar for an accuracy claim)" in text
    assert "### Mixup 0.8 + CutMix 1.0 (fewer than 3 seeds for some init" in text
    assert "30.10 ± 0.14 (30.00, 30.20; 2 seeds: below the 3-seed bar)" in text
    assert "+5.15 ± 0.21 (+5.00, +5.30): ahead (spread 0.50); 2 seeds: below the 3-seed bar" in text
    assert "+5.00 (1 seed): no verdict" in text
    row = "| timm's default (trunc normal) | 30.50 ± 0.50 (30.00, 31.00, 30.50) | 30.10 ± 0.14 (30.00, 30.20; 2 seeds: "
    assert row + "below the 3-seed bar) | 25.00 (1 seed: below the 3-seed bar) |" in text


def test_crop_and_flip_is_read_from_the_size_tables_records():
    """One home for the 5,000-image crop + flip runs: the regime table reads the size table's records."""
    assert sources.REGIMES[sources.REGIME_REFERENCE][1] is sources.SIZE_SOURCES[sources.AUGMENT_SIZE]
    committed = build_campaign(REPO)
    regime, size = committed["augmentation"]["regimes"]["crop-flip"], committed["sizes"]["5000"]
    assert regime["arms"] == {name: size["arms"][name] for name in sources.SIZE_ARMS if name in size["arms"]}


def test_convit_geometry_is_stated_from_its_records(tmp_path, monkeypatch):
    """Catches a ConViT row whose width is not the one its records ran (timm's embed_dim is per head)."""
    convit = {**_record({"convit": {0: 40.0}}), "train_options": {}}
    convit["arms"]["convit"]["model_kwargs"] = {"embed_dim": 16, "num_heads": 3, "depth": 12, "local_up_to_layer": 10}
    (tmp_path / "c.json").write_text(json.dumps(convit))
    monkeypatch.setattr(records, "SIZE_SOURCES", {2_500: ("c.json",)})
    monkeypatch.setattr(records, "LENGTH_SOURCES", {10: ("none.json",), 50: ("none.json",)})
    record = build_campaign(tmp_path)
    assert record["sizes"]["2500"]["convit_geometry"]["width"] == 48
    text = render_campaign_markdown(record)
    assert "| ConViT (GPSA) | 40.00 (1 seed) |" in text
    assert "embed_dim=16, num_heads=3, depth=12, local_up_to_layer=10): timm's ConViT takes `embed_dim` per head, so " \
        "width 48 in 3 heads" in text  # fmt: skip


def test_the_attention_distance_table_says_whether_default_became_local():
    """Catches the locality line comparing the wrong numbers: default's most local trained block against the same
    regime's impulse 3x3 and against the reference regime's default."""
    from study.campaign.attention_distance import default_locality, render

    def run(init, trained):
        return {"top1": 30.0, "init": init, "trained": trained}

    regimes = {
        "crop + flip": {"default": run([4.1, 4.1], [4.0, 3.9]), "impulse3": run([1.0, 1.2], [1.5, 2.0])},
        "CutMix": {"default": run([4.1, 4.1], [1.4, 3.0]), "impulse3": run([1.0, 1.2], [1.6, 2.0])},
    }
    lines = default_locality(regimes)
    assert lines[0].startswith("crop + flip: timm's default trained, minimum over blocks 3.90;")
    assert "less local than impulse 3x3's" in lines[0]
    assert "CutMix: timm's default trained, minimum over blocks 1.40 (under crop + flip: 3.90; -2.50)" in lines[1]
    assert "as local as impulse 3x3's" in lines[1]
    assert lines[-1] == "Answer: yes under CutMix: timm's default's most local block reached impulse 3x3's."
    text = render({"description": "d", "regimes": regimes, "default_locality": lines})
    assert "| CutMix | timm's default | 30.00 | 4.10 / 4.10 | 2.20 / 1.40 |" in text
    regimes["CutMix"]["default"]["trained"] = [3.0, 3.5]
    assert default_locality(regimes, 4.14)[-1] == (
        "Answer: no: under no augmentation did timm's default's most local block reach impulse 3x3's (its closest: "
        "3.00 against uniform attention's 4.14)."
    )


def test_a_retrained_run_is_set_beside_the_committed_one(tmp_path, monkeypatch):
    """Catches the retrained crop + flip runs compared with anything but the committed run of the same init and seed."""
    (tmp_path / "rerun").mkdir()
    (tmp_path / "rerun/results.json").write_text(json.dumps(_record({"default": {0: 30.25}, "impulse3": {0: 36.0}})))
    monkeypatch.setattr(records, "RERUN_SOURCES", ("rerun/results.json",))
    crop_flip = {"default": {0: 30.0, 1: 31.0, 2: 30.5}, "impulse3": {0: 36.0, 1: 37.0, 2: 36.5}}
    record = _regime_tree(tmp_path, monkeypatch, {"crop-flip": crop_flip, "randaug": {}, "mixcut": {}})
    assert record["augmentation"]["rerun"]["arms"]["default"][0]["difference"] == 0.25
    text = render_campaign_markdown(record)
    assert "| timm's default (trunc normal) | s0 | 30.00 | 30.25 | +0.25 | torch ?, structinit_hf ? |" in text
    assert "| impulse 3x3, `shift` (default) | s0 | 36.00 | 36.00 | +0.00 |" in text


def test_the_width_table_judges_each_init_against_default_and_shift(tmp_path, monkeypatch):
    def record(width: int, arms: dict[str, dict[int, float]], gpu: str | None = None) -> dict:
        built = _record(arms)
        for arm in built["arms"].values():
            arm["wall_time_s"] = [600.0] * len(arm["seeds"])
        numerics = {"gpu": gpu} if gpu else {"torch_threads": 1}
        options = {"lr": 1e-3, "warmup_epochs": 1.0, "epochs": 10}
        return {**built, "architecture": {"embed_dim": width}, "train_options": options, "numerics": numerics}

    main = record(192, {"default": {0: 30.0, 1: 31.0, 2: 30.5}, "impulse3": {0: 22.0, 1: 21.0, 2: 23.0}})
    presets = record(192, {"default": {0: 30.0, 1: 31.0}, "v1": {0: 33.0, 1: 34.0}}, gpu="NVIDIA H200")
    (tmp_path / "main.json").write_text(json.dumps(main))
    (tmp_path / "presets.json").write_text(json.dumps(presets))
    setting = WidthSetting(2_500, 192, 1e-3, ("main.json", "presets.json"), note="Why this setting.")
    monkeypatch.setattr(records, "WIDTH_SETTINGS", {"2500/192/0.001": setting})
    width = build_width(tmp_path)["2500/192/0.001"]
    assert width["head_dim"] == 64 and width["not_run"] == ["mimetic", "v2"]
    assert width["devices"] == {"CPU": [0, 1, 2], "NVIDIA H200": [0, 1]}
    assert width["vs"]["default"]["impulse3"]["verdict"] == "behind"
    assert width["vs"]["impulse3"]["v1"]["per_seed"] == {0: 11.0, 1: 13.0}  # the presets' seeds, paired
    assert width["vs"]["impulse3"]["v1"]["verdict"] == "ahead"
    text = "\n".join(width_markdown({"2500/192/0.001": width}))
    assert "vs `shift`: paired diff" in text and "width 192 (head dim 64), lr 0.001\n" in text and "10 min" in text
    assert "Why this setting." in text and "Trained on: CPU (s0, s1, s2); NVIDIA H200 (s0, s1)." in text
    warm = {**presets, "train_options": {"lr": 1e-3, "warmup_epochs": 5.0, "epochs": 10}}
    (tmp_path / "presets.json").write_text(json.dumps(warm))
    with pytest.raises(ValueError, match="width 192 at lr 0.001 with 5 warm-up epoch"):
        build_width(tmp_path)
    monkeypatch.setattr(records, "WIDTH_SETTINGS", {"w5": replace(setting, sources=("presets.json",), warmup_epochs=5)})
    assert "lr 0.001, 5 warm-up epochs" in "\n".join(width_markdown(build_width(tmp_path)))
    monkeypatch.setattr(records, "WIDTH_SETTINGS", {"2500/192/0.001": setting})
    (tmp_path / "presets.json").write_text(json.dumps({**presets, "architecture": {"embed_dim": 96}}))
    with pytest.raises(ValueError, match="width 96 at lr 0.001 with 1 warm-up epoch"):
        build_width(tmp_path)
    (tmp_path / "presets.json").write_text(json.dumps({**presets, "train_options": {"lr": 3e-4, "epochs": 10}}))
    with pytest.raises(ValueError, match="width 192 at lr 0.0003 with 1 warm-up epoch.*listed as 192 at 0.001"):
        build_width(tmp_path)
    (tmp_path / "presets.json").write_text(json.dumps({**presets, "train_options": {"lr": 1e-3, "epochs": 50}}))
    with pytest.raises(ValueError, match="warm-up epoch\\(s\\) of 50, listed as 192 at 0.001 with 1 of 10"):
        build_width(tmp_path)
    monkeypatch.setattr(records, "WIDTH_SETTINGS", {"long": replace(setting, sources=("presets.json",), epochs=50)})
    assert "width 192 (head dim 64), lr 0.001, 50 epochs\n" in "\n".join(width_markdown(build_width(tmp_path)))


def test_each_init_is_judged_at_its_better_learning_rate_too():
    from study.campaign.records import build_best_rate
    from study.campaign.scores import summarize_setting
    from study.campaign.tables import best_rate_markdown

    def setting(lr: float, scores: dict[str, dict[int, float]]) -> dict:
        return {"lr": lr, **summarize_setting(scores, sources.WIDTH_ARMS, sources.WIDTH_REFERENCES)}

    width = {  # timm's default best at the high rate, `shift` at the low one, where timm's default is lower
        "fast": setting(1e-3, {"default": {0: 30.0, 1: 29.0, 2: 31.0}, "impulse3": {0: 26.0, 1: 27.0, 2: 26.5}}),
        "slow": setting(3e-4, {"default": {0: 28.0, 1: 28.5, 2: 29.0}, "impulse3": {0: 35.0, 1: 34.0, 2: 34.5}}),
        "other width": setting(3e-4, {"default": {0: 40.0, 1: 40.0, 2: 40.0}}),
    }
    for key, size in (("fast", 192), ("slow", 192), ("other width", 96)):
        width[key].update(images=2_500, width=size, head_dim=size // 3, warmup_epochs=1.0, epochs=10)
    best = build_best_rate(width, ("fast", "slow"))
    assert best["rates"] == {"default": 1e-3, "impulse3": 3e-4} and best["grid"] == [1e-3, 3e-4]
    versus = best["vs"]["default"]["impulse3"]
    assert versus["per_seed"] == {0: 5.0, 1: 5.0, 2: 3.5} and versus["verdict"] == "ahead"
    text = "\n".join(best_rate_markdown(best))
    assert text.startswith("### Width 192 (head dim 64), 2,500 images: each init at its better learning rate")
    assert "peak learning rates 0.001 and 0.0003" in text and "timm's default (trunc normal) 0.001" in text
    with pytest.raises(ValueError, match="differ in more than the rate"):
        build_best_rate(width, ("fast", "other width"))
    width["slow"]["epochs"] = 50
    with pytest.raises(ValueError, match="differ in more than the rate"):
        build_best_rate(width, ("fast", "slow"))


def test_the_longer_run_of_a_width_is_paired_with_its_ten_epochs_on_the_seed():
    from study.campaign.records import build_width_length
    from study.campaign.scores import summarize_setting
    from study.campaign.tables import width_length_markdown

    def setting(epochs: int, scores: dict[str, dict[int, float]], devices: dict[str, list[int]]) -> dict:
        geometry = {"images": 2_500, "width": 192, "head_dim": 64, "lr": 3e-4, "warmup_epochs": 1.0}
        summary = summarize_setting(scores, sources.WIDTH_ARMS, sources.WIDTH_REFERENCES)
        return {**geometry, "epochs": epochs, "devices": devices, **summary}

    ten = {"default": {0: 29.0, 1: 28.0, 2: 30.0}, "impulse3": {0: 35.0, 1: 34.0}, "v1": {0: 33.0}}
    width = {
        "10": setting(10, ten, {"NVIDIA H200": [0, 1, 2]}),
        "50": setting(50, {"default": {0: 40.5}, "impulse3": {0: 44.0}, "mimetic": {0: 43.0}}, {"CPU": [0]}),
    }
    length = build_width_length(width, ("10", "50"))
    assert length["epochs"] == [10, 50] and length["lr"] == 3e-4
    assert {name: gain["per_seed"] for name, gain in length["long_minus_short"].items()} == {
        "default": {0: 11.5},  # seed 0 alone: the seed both settings have
        "impulse3": {0: 9.0},
    }  # mimetic has no 10-epoch run, v1 no 50-epoch run: neither has a gain
    text = "\n".join(width_length_markdown(length))
    assert text.startswith("### Width 192 (head dim 64), 2,500 images, lr 0.0003: 50 epochs minus 10, same seed")
    assert "| init | mean gain from 5x the epochs | per seed |" in text and "| +9.00 | +9.00 |" in text
    assert "Trained: 10 epochs on NVIDIA H200 (s0, s1, s2); 50 on CPU (s0). The two lengths ran on different" in text
    width["10"]["devices"] = {"CPU": [0, 1, 2]}  # one device: no caveat
    assert "different devices" not in "\n".join(width_length_markdown(build_width_length(width, ("10", "50"))))
    with pytest.raises(ValueError, match="fewer, then more epochs"):
        build_width_length(width, ("50", "10"))
    width["50"]["lr"] = 1e-3
    with pytest.raises(ValueError, match="nothing else apart"):
        build_width_length(width, ("10", "50"))


def test_every_rate_grid_varies_the_rate_alone():
    for keys in sources.RATE_GRIDS.values():
        settings = [sources.WIDTH_SETTINGS[key] for key in keys]
        assert len({replace(setting, lr=0.0, sources=(), note="") for setting in settings}) == 1
        assert len({setting.lr for setting in settings}) == len(settings) > 1


def test_every_length_pair_varies_the_epochs_alone():
    for short, long in (map(sources.WIDTH_SETTINGS.get, keys) for keys in sources.WIDTH_LENGTHS.values()):
        assert replace(short, epochs=0, sources=(), note="") == replace(long, epochs=0, sources=(), note="")
        assert short.epochs < long.epochs


def test_the_width_table_quotes_the_committed_report():
    """Every paired figure of docs/campaign.md's width table is one the campaign report printed: no figure drifts
    from the committed records."""

    readme = (REPO / "docs" / "campaign.md").read_text()
    table = readme[readme.index("| 2,500 images, 10 epochs, 3 seeds |") :].split("\n\n")[0]
    figures = re.findall(r"[+-]\d+\.\d\d ± \d+\.\d\d", table)
    assert len(figures) == 22, table
    report = (REPO / "study/records/small_data/campaign/results.md").read_text()
    assert [figure for figure in figures if figure not in report] == []


def test_the_readme_is_150_lines_or_fewer():
    """The README stays at 150 lines or fewer (issue 46): the lab notes belong in docs/."""
    assert len((REPO / "README.md").read_text().splitlines()) <= 150


def test_the_readme_states_no_count_of_tests():
    """Catches a count of the suite's tests in the README ("867 tests"), which the next test added makes false."""
    assert re.findall(r"\b\d[\d,]* tests\b", (REPO / "README.md").read_text()) == []


def test_the_readme_which_init_table_quotes_the_committed_reports():
    """Every paired figure of the README's "which init, when" table (and the lines under it) is one a committed report
    printed: the campaign's, the structure report's (each init minus its norm-matched control) or the GPU record's;
    the figure above it is the one study/structure_report.py draws."""

    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Which init, when") : readme.index("## timm")]
    assert "study/records/small_data/structure/which_init.png" in section
    table = section[section.index("| your model |") :].split("\n\n")[0]
    rows = [line for line in table.splitlines() if line.startswith("|") and not line.startswith("|---")][1:]
    assert len(rows) >= 6, table  # the ViT settings, DeiT-III, the RoPE ViT, the families timm's default keeps
    reports = REPORT.read_text() + (REPO / "study/records/small_data/structure/results.md").read_text()
    gpu_row = next(row for row in rows if "all of CIFAR-10" in row)
    figure = r"[+-]?\d+\.\d\d ± \d+\.\d\d"
    paired = [found for row in rows if row is not gpu_row for found in re.findall(figure, row)]
    assert len(paired) >= 5 and [found for found in paired if found.lstrip("+-") not in reports] == []
    gpu = json.loads((REPO / "study/records/gpu/cifar10-paper-recipe/results.json").read_text())
    gpu_paired = [
        f"{gpu['vs_default'][arm]['mean']:+.2f} ± {gpu['vs_default'][arm]['std']:.2f}"
        for arm in ("mimetic", "impulse3")
    ]
    assert re.findall(figure, gpu_row) == gpu_paired, (gpu_paired, gpu_row)


def test_convergence_times_the_catch_up_within_the_longest_schedule(tmp_path, monkeypatch):
    """Catches a catch-up read off the wrong epoch, or from a length that is not the longest run so far, and a record
    listed under a length it did not train."""
    from study.campaign import convergence

    def run(name, seed, curve, top1, epochs):
        record = _record({name: {seed: top1}})
        record["arms"][name]["val_top1"] = [curve]
        record["train_options"] = {"epochs": epochs}
        path = tmp_path / f"L{epochs}/seed{seed}-{name}/results.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(record))

    for seed in (0, 1):
        run("default", seed, [10.0 + seed] * 3 + [20.0, 31.0, 40.0, 41.0, 42.0, 43.0, 44.0, 45.0, 46.0], 40.0, 12)
        run("impulse3", seed, [30.0 + seed] * 10 + [50.0, 51.0], 48.0 + seed, 12)
        run("default", seed, [10.0] * 4, 20.0, 4)
        run("impulse3", seed, [12.0] * 4, 25.0, 4)
    monkeypatch.setattr(
        convergence, "CONVERGENCE_SOURCES", {"toy": {4: ("L4/seed*/results.json",), 12: ("L12/seed*/results.json",)}}
    )
    toy = convergence.build_convergence(tmp_path)["toy"]
    assert "catch_up" not in toy["4"] and set(toy["12"]["catch_up"]) == {"10"}
    assert toy["12"]["catch_up"]["10"] == {
        0: {"shift_val_top1": 30.0, "default_epoch": 5},  # 31.0 at epoch 5 is the first >= 30.0
        1: {"shift_val_top1": 31.0, "default_epoch": 5},
    }
    assert toy["12"]["vs"]["default"]["impulse3"]["per_seed"] == {0: 8.0, 1: 9.0}
    text = "\n".join(convergence.convergence_markdown({"toy": toy}))
    assert (
        "seed 0: 30.0 -> epoch 5" in text and "+8.50 ± 0.71: ahead (spread 1.00, 2 seeds, below the bar of 3)" in text
    )
    monkeypatch.setattr(convergence, "CONVERGENCE_SOURCES", {"toy": {6: ("L4/seed*/results.json",)}})
    with pytest.raises(ValueError, match="4 epochs, listed under 6"):
        convergence.build_convergence(tmp_path)
