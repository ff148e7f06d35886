"""The comparison a user runs: ``structinit-hf compare`` (:mod:`.compare_inits`), its arms, profiles, paired-seed
statistics and tie rule, the summary it writes, and the attention pictures (``scripts/plot_attention.py``).
Training goes through :func:`structinit_hf.train.run` only.

    from structinit_hf.benchmark import CompareSettings, compare

    result = compare(CompareSettings(dataset="my_images/", seeds=(0, 1, 2)))
    print(result.table)  # the printed table; result.top1, result.verdicts, result.output_dir

:func:`compare` loads torch, datasets and the training stack when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .compare_settings import CompareResult, CompareSettings

if TYPE_CHECKING:
    from .compare_inits import compare

__all__ = ["CompareResult", "CompareSettings", "compare"]


def __getattr__(name: str) -> Any:
    if name == "compare":  # PEP 562: its module imports the training stack
        from .compare_inits import compare

        return compare
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
