"""Publish a trained run on the Hugging Face Hub: stage the exact repo folder, then one ``upload_folder`` commit.

The repo folder is the run's ``final/`` checkpoint (the :func:`~structinit_hf.models.timm_wrapper.save_checkpoint`
folder that loads with timm and with transformers), plus the model card (``README.md``, see
:mod:`.cards`), the run's ``results.json`` and, when the run drew one, its picture of the initial
attention maps. It is staged in a temporary folder, so a failed or dry run leaves nothing behind and the run folder is
only read.

Authentication and endpoint are huggingface_hub's own: ``HF_TOKEN`` (or a saved login) and ``HF_ENDPOINT``. The token
is never passed around, printed or written (huggingface_hub puts it in the request headers); it is only read to refuse
a folder that contains it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import HfApi, get_token
from huggingface_hub import constants as hf_constants
from huggingface_hub.errors import HfHubHTTPError

from ...atomic import replace_folder
from ..cli.args import DefaultsHelpFormatter
from ..cli.errors import UsageError
from ..settings import PushSettings
from .cards import build_model_card, count_parameters, parent_name, read_results

__all__ = [
    "ATTENTION_IMAGE",
    "CARD_FILE",
    "CONFIG_FILE",
    "PushResult",
    "RESULTS_FILE",
    "RunFiles",
    "WEIGHTS_FILE",
    "find_run_files",
    "push_parser",
    "push_to_hub",
    "run_push",
    "stage_repo_folder",
]

CARD_FILE = "README.md"


ATTENTION_IMAGE = "attention_init.png"


WEIGHTS_FILE = "model.safetensors"


CONFIG_FILE = "config.json"


RESULTS_FILE = "results.json"


@dataclass(frozen=True)
class RunFiles:
    """The files of a training run (contract of ``scripts/train.py``) that a Hub repo is built from."""

    run_dir: Path
    checkpoint_dir: Path  # run_dir/final: the save_checkpoint folder
    results: Path
    attention_image: Path | None


@dataclass(frozen=True)
class PushResult:
    """What was (or, for a dry run, would be) uploaded."""

    repo_id: str
    files: dict[str, int]  # path in repo -> size in bytes
    card: str
    commit_message: str
    commit_url: str | None  # None for a dry run


def find_run_files(run_dir: str | os.PathLike) -> RunFiles:
    """Locate the checkpoint, ``results.json`` and optional picture of a run; say exactly what is missing."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run folder {run_dir} does not exist")
    # a run's final/ checkpoint, or a folder laid out as the repo it publishes (a zoo model: weights at the top)
    top_level = (run_dir / WEIGHTS_FILE).is_file() and not (run_dir / "final").is_dir()
    checkpoint_dir = run_dir if top_level else run_dir / "final"
    results = next((p for p in (run_dir / RESULTS_FILE, checkpoint_dir / RESULTS_FILE) if p.is_file()), None)
    missing = []
    if results is None:
        missing.append(f"no {RESULTS_FILE} ({run_dir / RESULTS_FILE} or {checkpoint_dir / RESULTS_FILE})")
    for name, what in ((WEIGHTS_FILE, "no weights"), (CONFIG_FILE, "no model config")):
        if not (checkpoint_dir / name).is_file():
            missing.append(f"{what} ({checkpoint_dir / name})")
    if missing:
        raise FileNotFoundError(
            f"run folder {run_dir} cannot be published: {'; '.join(missing)}. Publish a finished run of "
            "scripts/train.py (its final/ checkpoint and results.json) or a zoo folder (zoo/<model>)."
        )
    image = run_dir / ATTENTION_IMAGE
    return RunFiles(run_dir, checkpoint_dir, results, image if image.is_file() else None)


def _commit_message(run: RunFiles, results: dict) -> str:
    parent = parent_name(results.get("fine_tuned_from"))
    model = f"fine-tuned from {parent}" if parent else results["model"]
    return f"Upload run {run.run_dir.name}: {model}, top-1 {results['top1']:.2f}% on {results['split']}"


def stage_repo_folder(
    run_dir: str | os.PathLike,
    repo_id: str,
    out_dir: str | os.PathLike,
    *,
    dataset_id: str | None = None,
    license: str = "apache-2.0",
) -> Path:
    """Write the exact folder that :func:`push_to_hub` uploads for ``run_dir`` into ``out_dir`` (new or empty).

    The folder is assembled next to ``out_dir`` and swapped in once complete (``atomic.replace_folder``).
    """
    run = find_run_files(run_dir)
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise FileExistsError(f"{out_dir} already exists and is not an empty folder; stage into a new folder")
    results = read_results(run.results)
    checkpoint_config = json.loads((run.checkpoint_dir / CONFIG_FILE).read_text(encoding="utf-8"))
    card = build_model_card(
        results,
        checkpoint_config,
        repo_id,
        num_params=count_parameters(run.checkpoint_dir / WEIGHTS_FILE),
        dataset_id=dataset_id,
        license=license,
        attention_image=ATTENTION_IMAGE if run.attention_image else None,
    )

    def write(folder: Path) -> None:
        shutil.copytree(run.checkpoint_dir, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(run.results, folder / RESULTS_FILE)
        if run.attention_image:
            shutil.copy2(run.attention_image, folder / ATTENTION_IMAGE)
        card.save(folder / CARD_FILE)

    return replace_folder(out_dir, write)


def _refuse_secrets(folder: Path, tokens: set[str | None]) -> None:
    """Refuse to publish a folder in which a Hub token appears (e.g. in a recorded training option)."""
    needles = [token.encode() for token in tokens if token]
    for path in sorted(folder.rglob("*")):
        if path.is_file() and any(needle in path.read_bytes() for needle in needles):
            raise ValueError(
                f"{path.relative_to(folder)} contains your Hub access token; it is not uploaded. Remove the token "
                "from the run's files (e.g. the recorded training options) and retry."
            )


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [""])[0][:200]


def _is_network_error(error: BaseException) -> bool:
    """A connection that could not be made or broke off: ``OSError`` (``requests``' errors are) or the HTTP
    client's transport errors (``httpx``'s ``TransportError`` family), whichever client huggingface_hub uses."""
    names = {cls.__name__ for cls in type(error).__mro__}
    return isinstance(error, OSError) or bool(names & {"TransportError", "RequestError", "TimeoutException"})


def _list_files(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def push_to_hub(settings: PushSettings) -> PushResult:
    """Publish the trained run ``settings.run_dir`` as the Hub model ``settings.repo_id`` (created if needed) in one
    commit, or with ``dry_run`` stage it and report the files and card without any network call; returns what was
    (or would be) uploaded and the commit's URL::

        from structinit_hf.train import PushSettings, push_to_hub

        pushed = push_to_hub(PushSettings(run_dir="runs/x", repo_id="me/vit-x"))
        print(pushed.commit_url)

    ``private`` creates the repo private (an existing repo keeps its visibility); ``revision`` is the branch committed
    to (created from ``main`` if missing); ``dataset_id`` the Hub id of the training dataset when the run read a local
    copy; ``license`` the id the card declares; ``endpoint`` the Hub URL (``None``: ``HF_ENDPOINT``).
    """
    run_dir, repo_id, dry_run = settings.run_dir, settings.repo_id, settings.dry_run
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ValueError(f"repo_id must be 'namespace/name', got {repo_id!r}")
    run = find_run_files(run_dir)
    commit_message = _commit_message(run, read_results(run.results))
    with tempfile.TemporaryDirectory(prefix="structinit-push-") as tmp:
        folder = stage_repo_folder(
            run_dir, repo_id, Path(tmp) / "repo", dataset_id=settings.dataset_id, license=settings.license
        )
        # a dry run reads the token from the environment only: get_token() may refresh a saved login online
        tokens = {os.environ.get("HF_TOKEN"), os.environ.get("HUGGING_FACE_HUB_TOKEN")}
        _refuse_secrets(folder, tokens if dry_run else tokens | {get_token()})
        files = _list_files(folder)
        card = (folder / CARD_FILE).read_text(encoding="utf-8")
        if dry_run:
            return PushResult(repo_id, files, card, commit_message, None)
        if hf_constants.is_offline_mode():
            raise UsageError("HF_HUB_OFFLINE is set, so nothing can be uploaded; unset it, or use a dry run")
        commit_url = _upload(
            HfApi(endpoint=settings.endpoint),
            run,
            folder,
            files,
            repo_id,
            private=settings.private,
            revision=settings.revision,
            message=commit_message,
        )
    return PushResult(repo_id, files, card, commit_message, commit_url)


def _upload(
    api: HfApi,
    run: RunFiles,
    folder: Path,
    files: dict[str, int],
    repo_id: str,
    *,
    private: bool,
    revision: str | None,
    message: str,
) -> str:
    """Create ``repo_id`` (and the branch ``revision``) if needed and upload ``folder`` to it in one commit; returns the
    commit's URL. A refusal or a lost connection is a ``ConnectionError`` that says nothing was committed."""
    try:
        api.create_repo(repo_id, private=True if private else None, exist_ok=True)
        if revision is not None and revision != hf_constants.DEFAULT_REVISION:
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=folder,
            revision=revision,
            commit_message=message,
            commit_description=f"Run folder: {run.run_dir.name}. Files: {', '.join(files)}.",
        )
    except HfHubHTTPError as err:
        status = err.response.status_code if err.response is not None else "no response"
        hint = " Check HF_TOKEN (a write token for this namespace)." if status in (401, 403) else ""
        raise ConnectionError(
            f"uploading {run.run_dir} to {api.endpoint}/{repo_id} failed (HTTP {status}: {_first_line(err)}) "
            f"before the commit completed; the run folder is unchanged, rerun the same command to retry.{hint}"
        ) from err
    except Exception as err:
        if not _is_network_error(err):
            raise
        raise ConnectionError(
            f"cannot reach {api.endpoint} to upload {run.run_dir} to {repo_id} ({type(err).__name__}: "
            f"{_first_line(err)}); check the network and HF_ENDPOINT, then rerun the same command (nothing was "
            "committed, the run folder is unchanged)"
        ) from err
    return commit.commit_url


def push_parser() -> argparse.ArgumentParser:
    """The flags of ``structinit-hf push-to-hub`` (``scripts/push_to_hub.py``)."""
    parser = argparse.ArgumentParser(
        allow_abbrev=False,
        description="Publish a trained run on the Hugging Face Hub with its model card.",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--run-dir", required=True, help="output folder of a training run (final/ + results.json)")
    parser.add_argument("--repo-id", required=True, help="model repo to create or update, 'namespace/name'")
    parser.add_argument(
        "--private", action="store_true", help="create the repo private; default: the namespace's default visibility"
    )
    parser.add_argument("--revision", default=None, help="branch to commit to (created if missing); default: main")
    parser.add_argument(
        "--dataset-id",
        default=None,
        help="Hub id of the dataset when the run read a local copy of one; default: none, for a local dataset of your "
        "own (the card says so, with its classes and sizes)",
    )
    parser.add_argument("--license", default="apache-2.0", help="license id declared in the card")
    parser.add_argument("--dry-run", action="store_true", help="print files and card; no network call")
    return parser


def run_push(args: argparse.Namespace) -> None:
    """``structinit-hf push-to-hub`` (``scripts/push_to_hub.py``): :func:`push_to_hub` on the parsed command line,
    printing the files and the commit (with ``--dry-run``, the files and the card)."""
    result = push_to_hub(PushSettings(**vars(args)))
    for path, size in result.files.items():
        print(f"{size:>12,d}  {path}")
    if result.commit_url is None:
        print(f"\ndry run: nothing uploaded; commit would be {result.commit_message!r}\n")
        print(result.card)
    else:
        print(f"\n{result.commit_message}\n{result.commit_url}")
