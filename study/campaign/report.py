"""``study/campaign_report.py``: the campaign's record, ``results.md`` and figures written into one folder."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from structinit_hf.atomic import write_json, write_text

from .convergence import plot_convergence
from .figures import plot_augmentation, plot_sizes
from .records import build_campaign
from .sources import BENCH
from .tables import render_campaign_markdown

__all__ = ["campaign_parser", "report_campaign", "write_campaign"]


def write_campaign(root: Path | str = ".", out_dir: Path | str = f"{BENCH}/campaign") -> dict[str, Any]:
    """Build the campaign's record from ``root``; write results.json, results.md, size.png, augmentation.png and
    convergence.png into ``out_dir``."""
    record = build_campaign(root)
    out_dir = Path(out_dir)
    write_json(out_dir / "results.json", record)
    write_text(out_dir / "results.md", render_campaign_markdown(record))
    plot_sizes(record, out_dir / "size.png")
    plot_augmentation(record, out_dir / "augmentation.png")
    plot_convergence(record["convergence"], out_dir / "convergence.png")
    return record


def campaign_parser(description: str) -> argparse.ArgumentParser:
    """The flags of ``study/campaign_report.py``; ``description`` is the first line of its help."""
    parser = argparse.ArgumentParser(allow_abbrev=False, description=description)
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root (default: .)")
    parser.add_argument("--out-dir", type=Path, default=Path(f"{BENCH}/campaign"))
    return parser


def report_campaign(args: argparse.Namespace) -> None:
    """Write the campaign's summary from the records under ``args.root`` into ``args.out_dir`` and say so."""
    write_campaign(args.root, args.out_dir)
    print(f"wrote {args.out_dir / 'results.md'}, results.json, size.png, augmentation.png and convergence.png")
