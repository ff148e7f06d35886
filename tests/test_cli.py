"""The scripts' common entry point: user errors are one line and exit status 2, bugs keep their traceback."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import script_path

from structinit_hf.train.cli.commands import run_script
from structinit_hf.train.cli.errors import USAGE_EXIT_STATUS, UsageError, check_kwarg_types, did_you_mean

REPO = Path(__file__).resolve().parents[1]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    parser.add_argument("--value", type=int, default=1)
    return parser


def _fails_with(error: BaseException):
    def function(args: argparse.Namespace) -> None:
        raise error

    return function


@pytest.mark.parametrize(
    "error",
    [UsageError("--value 3 is too big; allowed: 1 or 2"), FileNotFoundError(2, "No such file", "x.json")],
)
def test_user_error_is_one_line_and_status_2(error, capsys):
    """Catches a user error escaping as a traceback, or ending with status 0/1 that scripts cannot tell apart."""
    assert run_script(_parser(), _fails_with(error), []) == USAGE_EXIT_STATUS == 2
    err = capsys.readouterr().err
    assert err == f"error: {error}\n"
    assert "Traceback" not in err


def test_debug_shows_the_traceback():
    """Catches --debug being swallowed: the original exception must propagate."""
    with pytest.raises(UsageError, match="too big"):
        run_script(_parser(), _fails_with(UsageError("too big")), ["--debug"])


def test_a_bug_keeps_its_traceback():
    """Catches a catch-all: a TypeError from a programming mistake is not reported as a user error."""
    with pytest.raises(TypeError):
        run_script(_parser(), _fails_with(TypeError("bug")), [])


def test_function_gets_its_own_flags_only():
    """Catches --debug leaking into the namespace (it would land in results.json and in resume checks)."""
    seen = {}

    def function(args: argparse.Namespace) -> int:
        seen.update(vars(args))
        return 3

    assert run_script(_parser(), function, ["--value", "5", "--debug"]) == 3
    assert seen == {"value": 5}
    assert run_script(_parser(), lambda args: {"top1": 1.0}, []) == 0


def test_did_you_mean():
    """Catches a suggestion that is missing for a typo, or made up for a name that resembles nothing."""
    assert did_you_mean("kernal_size", ["kernel_size", "seed", "depth"]) == " (did you mean 'kernel_size'?)"
    assert did_you_mean("zzz", ["kernel_size", "seed"]) == ""


def test_plot_attention_script_reports_a_user_error_in_one_line(capsys):
    """Catches scripts/plot_attention.py's function raising a user error that run_script turns into a traceback."""
    from structinit_hf.benchmark.plots import attention_parser, draw_attention

    argv = ["--model", "vit_tiny_impulse3", "vit_tiny_mimetic", "--checkpoint", "runs/only-one"]
    assert run_script(attention_parser(), draw_attention, argv) == 2
    assert capsys.readouterr().err == "error: got 1 checkpoints for 2 models; pass one per model\n"


# a benchmark script, its argv (relative paths, from an empty folder) and how its one error line starts
BENCHMARK_ERRORS = {
    "solver": (
        "study/benchmark_solver",
        ["--data", "no/such/folder"],
        "error: --data 'no/such/folder' is not a dataset folder",
    ),
    "no-data-root": (
        "study/benchmark_small_data",
        ["--profile", "cifar10"],
        "error: profile 'cifar10' reads 'cifar10' from a local folder: pass --data-root DIR (the folder holding "
        "cifar10/, e.g. data) or --data-path",
    ),
    "missing-data-root": (
        "study/benchmark_small_data",
        ["--profile", "cifar10", "--data-root", "no/such"],
        "error: dataset folder 'no/such/cifar10' does not exist; pass its location with --data-path",
    ),
}


def _check_benchmark_error(case: str, done: subprocess.CompletedProcess) -> None:
    """Catches a benchmark script raising past run_script (status 1 and a traceback) on a missing data folder."""
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(BENCHMARK_ERRORS[case][2])


@pytest.mark.parametrize("case", BENCHMARK_ERRORS)
def test_benchmark_scripts_exit_2_with_one_line(case, tmp_path, monkeypatch, script_in_process):
    script, argv, _ = BENCHMARK_ERRORS[case]
    monkeypatch.chdir(tmp_path)
    _check_benchmark_error(case, script_in_process(script, argv))


@pytest.mark.slow  # a fresh Python, as a shell starts the script
def test_a_benchmark_script_from_a_fresh_process_exits_2_with_one_line(tmp_path):
    script, argv, _ = BENCHMARK_ERRORS["missing-data-root"]
    command = [sys.executable, str(script_path(script)), *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    _check_benchmark_error("missing-data-root", done)


def test_model_kwargs_are_parsed_as_literals_with_strings_as_fallback():
    """Catches --model-kwargs values left as strings ('3' for depth) or bare words rejected."""
    from structinit_hf.train.cli.args import training_parser

    args = training_parser().parse_args(["--model-kwargs", "depth=3", "pseudo_input=learned", "sharpness=None"])
    assert args.model_kwargs == {"depth": 3, "pseudo_input": "learned", "sharpness": None}


def test_model_kwargs_word_without_equals_is_a_usage_error(capsys):
    """Catches timm's ParseKwargs behaviour: a word without '=' ended in a ValueError traceback from parse_args."""
    from structinit_hf.train.cli.args import training_parser

    with pytest.raises(SystemExit) as exit_info:
        training_parser().parse_args(["--model-kwargs", '{"depth": 3}'])
    assert exit_info.value.code == USAGE_EXIT_STATUS
    err = capsys.readouterr().err
    assert "--model-kwargs: '{\"depth\": 3}' is not key=value" in err and "Traceback" not in err


def test_keyword_types_follow_the_annotations_of_the_function_that_takes_them():
    """Catches a string, a bool for an int, a wrong-length tuple or a value outside a Literal reaching timm's builder,
    where it fails as a TypeError deep inside (``depth=abc``), and a checker that refuses what the type allows."""
    from typing import Literal, Union

    hints = {
        "depth": int,
        "ratio": float,
        "size": Union[int, tuple[int, int]],  # noqa: UP007  (timm's own annotations are typing.Union)
        "pool": Literal["avg", "token"],
        "init": float | None,
        "layer": type,
        "layers": list[int],
        "img_size": int,  # timm annotates some sizes as int and converts (h, w) too
    }
    good = dict(depth=3, ratio=4, size=(16, 16), pool="avg", init=None, layer="anything", layers=[3, 4, 6, 3])
    check_kwarg_types(dict(img_size=(32, 32)), hints, "--model-kwargs")
    check_kwarg_types(good, hints, "--model-kwargs")
    check_kwarg_types({"unknown": object()}, hints, "--model-kwargs")  # not annotated: not judged
    for name, value, allowed in [
        ("depth", "abc", "int"),
        ("depth", True, "int"),
        ("ratio", "x", "float"),
        ("size", (16, 16, 3), "int or (int, int)"),
        ("pool", "mean", "one of 'avg', 'token'"),
        ("init", "a", "float or None"),
        ("layers", [3, "a"], "a list of int"),
        ("img_size", "x", "int"),
    ]:
        with pytest.raises(UsageError) as error:
            check_kwarg_types({name: value}, hints, "--model-kwargs")
        assert str(error.value) == f"--model-kwargs {name}={value!r}: {name} takes {allowed}"


@pytest.mark.parametrize("model", ["vit_tiny_impulse3", "vit_tiny_patch16_224", "convit_tiny_patch2_32"])
def test_the_keywords_users_pass_are_not_refused(model):
    """Catches the check refusing what timm builds: sizes as an int or (h, w), rates, pools, init options."""
    from structinit_hf.train.models.kwargs import check_model_kwargs

    common = dict(img_size=32, patch_size=4, drop_path_rate=0.1, num_classes=10)
    vit = dict(global_pool="avg", class_token=False)
    ours = dict(pos_embed="sincos", kernel_size=5, preset="v2", solver="svd", qk_frobenius=7, seed=1)
    for kwargs in (common, dict(common, img_size=(32, 32), patch_size=(4, 4))):
        kwargs = dict(kwargs, **(vit if model.startswith("vit") else {}), **(ours if "impulse" in model else {}))
        check_model_kwargs(kwargs, model)
    with pytest.raises(UsageError, match=r"^--model-kwargs depth='abc': depth takes int$"):
        check_model_kwargs(dict(depth="abc"), model)


def test_every_training_flag_has_one_settings_field_and_the_record_keeps_them_all():
    """Catches a flag added to the parser but to no settings group (a run would ignore it and results.json would not
    record it), a flag in two groups, and a resolved value (precision, accumulation) that does not reach the record."""
    import dataclasses

    from structinit_hf.train.cli.args import settings_from_args, training_parser
    from structinit_hf.train.settings import TrainingSettings

    parser = training_parser()
    dests = [action.dest for action in parser._actions if action.dest != "help"]
    assert settings_from_args(parser.parse_args([])) == TrainingSettings()  # each field's default is its flag's
    settings = settings_from_args(parser.parse_args(["--scale", "0.5", "1"]))
    fields = [
        f.name for group in dataclasses.fields(settings) for f in dataclasses.fields(getattr(settings, group.name))
    ]
    assert sorted(fields) == sorted(dests) and len(set(fields)) == len(fields)
    assert settings.recipe.scale == (0.5, 1.0)  # nargs lists become tuples: a frozen group holds no list
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.recipe.grad_accum = 2
    flags = settings.flags(mixed_precision="bf16", grad_accum=4)
    assert list(flags) == fields and flags["mixed_precision"] == "bf16" and flags["grad_accum"] == 4
    assert settings.speed.mixed_precision is None and settings.recipe.grad_accum is None  # the settings stay as parsed
    with pytest.raises(KeyError, match="micro_batch"):
        settings.flags(micro_batch=8)


@pytest.mark.parametrize(
    ("model", "typo", "nearest"),
    [
        ("vit_tiny_impulse3", "kernal_size", "kernel_size"),  # an init option of this package's ViT
        ("vit_tiny_patch16_224", "embed_dimm", "embed_dim"),  # timm's entrypoint annotates its class
        ("fastvit_t8", "drop_path_rat", "drop_path_rate"),  # no annotation: the class named in timm's TypeError
    ],
)
def test_an_unknown_model_keyword_names_the_nearest_one(model, typo, nearest):
    """Catches a misspelt keyword surfacing as timm's bare TypeError (a traceback, no suggestion) for a network whose
    keywords cannot be read off the entrypoint's annotation."""
    from structinit_hf.train.models.loading import create_timm_model

    with pytest.raises(UsageError, match=rf"unknown model keyword '{typo}' for {model} \(did you mean '{nearest}'\?\)"):
        create_timm_model(model, **{typo: 0.1})


# every parser factory a command or script uses -> (module, factory, its arguments, an abbreviation, the flag)
PARSERS = {
    "train": ("structinit_hf.train.cli.args", "training_parser", (), "--epoch", "--epochs"),
    "evaluate": ("structinit_hf.train.cli.args", "evaluation_parser", (), "--batch", "--batch-size"),
    "compare": ("structinit_hf.benchmark.compare_inits", "compare_parser", (), "--seed", "--seeds"),
    "push-to-hub": ("structinit_hf.train.publish.hub", "push_parser", (), "--revis", "--revision"),
    "benchmark_small_data": ("study.small_data", "benchmark_parser", (), "--seed", "--seeds"),
    "benchmark_solver": ("study.solver_cost", "solver_parser", (), "--repeat", "--repeats"),
    "benchmark_memory": ("study.step_memory", "memory_parser", (), "--micro", "--micro-batches"),
    "benchmark_training": ("study.training_speed", "throughput_parser", (), "--step", "--steps"),
    "plot_attention": ("structinit_hf.benchmark.plots", "attention_parser", (), "--check", "--checkpoint"),
    "campaign_attention_distance": (
        "study.campaign.attention_distance",
        "attention_distance_parser",
        (),
        "--num",
        "--num-images",
    ),
    "campaign_report": ("study.campaign.report", "campaign_parser", ("report",), "--ro", "--root"),
}


@pytest.mark.parametrize("command", PARSERS)
def test_every_parser_refuses_an_abbreviation(command, capsys):
    """Catches an abbreviation running as the flag it abbreviates (``--epoch 3`` as ``--epochs 3``, ``--seed`` as
    ``--seeds``): every public parser stops on it with argparse's usage error, exit status 2."""
    module, name, arguments, prefix, flag = PARSERS[command]
    parser = getattr(__import__(module, fromlist=[name]), name)(*arguments)
    required = [word for action in parser._actions if action.required for word in (action.option_strings[0], "x")]
    with pytest.raises(SystemExit) as stop:
        parser.parse_args([*required, prefix, "3"])
    assert stop.value.code == 2
    assert f"unrecognized arguments: {prefix} 3" in capsys.readouterr().err
    parser.allow_abbrev = True  # the test's own check: argparse would take the prefix for the flag, and no other
    assert parser.parse_args([*required, prefix, "3"]) == parser.parse_args([*required, flag, "3"])


def test_the_dispatcher_refuses_abbreviations(capsys, monkeypatch):
    """Catches ``structinit-hf compare --seed 1`` running as ``--seeds 1``."""
    from structinit_hf.__main__ import main
    from structinit_hf.benchmark import compare_inits

    monkeypatch.setattr(compare_inits, "compare_command", lambda args: 0)  # never trains, even when the test fails

    assert main(["compare", "--seed", "1"]) == 2
    assert "unrecognized argument --seed (did you mean '--seeds'?)" in capsys.readouterr().err


def test_no_parser_is_built_with_abbreviations():
    """Catches a new ``argparse.ArgumentParser(...)`` in the package, scripts or benchmarks without
    ``allow_abbrev=False`` (the parametrized test above only knows the factories it lists)."""
    import ast

    from package_imports import syntax_tree

    missing = []
    for path in [*REPO.glob("structinit_hf/**/*.py"), *REPO.glob("scripts/*.py"), *REPO.glob("study/**/*.py")]:
        for node in ast.walk(syntax_tree(path)):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", getattr(node.func, "id", "")) == "ArgumentParser"
            ):
                keywords = {k.arg: k.value for k in node.keywords}
                if not (
                    isinstance(keywords.get("allow_abbrev"), ast.Constant) and keywords["allow_abbrev"].value is False
                ):
                    missing.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert missing == []


@pytest.mark.parametrize("command", ["train", "evaluate", "compare", "push-to-hub"])
def test_every_flag_has_help_that_states_its_default_once(command):
    """Catches a flag without help (train's --epochs, --lr, --seed ...), without its default (compare's --epochs and
    --batch-size), with it twice ("(default: img or image) (default: None)"), or with a bare "(default: None)"
    where None means something the help must say (evaluate's --model, compare's --arms)."""
    from importlib import import_module

    from structinit_hf.__main__ import COMMANDS

    module, _, name = COMMANDS[command][0].partition(":")
    parser = getattr(import_module(f"structinit_hf.{module}"), name)()
    formatter = parser.formatter_class(prog=command)
    flags = [action for action in parser._actions if action.option_strings and action.dest != "help"]
    assert len(flags) > 5
    for action in flags:
        text = formatter._expand_help(action)  # the help line as --help prints it, defaults filled in
        assert action.help, f"{command} {action.option_strings[0]}: no help"
        assert text.count("default:") + text.count("(required)") == 1, f"{command} {action.option_strings[0]}: {text}"
        assert "default: None" not in text, f"{command} {action.option_strings[0]}: {text}"


def test_version_names_the_package_and_the_libraries_it_runs_on(capsys):
    """Catches a missing --version, or one that leaves out what a bug report needs (torch, timm, transformers)."""
    import timm
    import torch
    import transformers

    from structinit_hf import __version__
    from structinit_hf.__main__ import main

    for flag in ("--version", "-V"):
        assert main([flag]) == 0
        assert capsys.readouterr().out.strip() == (
            f"structinit-hf {__version__} (torch {torch.__version__}, timm {timm.__version__}, transformers "
            f"{transformers.__version__})"
        )
