"""The small-data campaign's summary (issue 20) from the committed benchmark records; trains nothing.

python scripts/campaign_report.py  # -> benchmarks/small_data/campaign/{results.md,results.json,*.png}
"""

import argparse
import sys
from pathlib import Path

from structinit_hf.train.commands import script_imports

with script_imports():
    from structinit_hf.benchmark.campaign import write_campaign

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root (default: .)")
    parser.add_argument("--out-dir", type=Path, default=Path("benchmarks/small_data/campaign"))
    args = parser.parse_args()
    with script_imports():  # the figure needs matplotlib (the bench extra)
        write_campaign(args.root, args.out_dir)
    print(f"wrote {args.out_dir / 'results.md'}, results.json, size.png and augmentation.png")
    sys.exit(0)
