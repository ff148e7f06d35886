"""Is it the structure? Each init against its norm-matched control, the relative-position ViT, mimetic MLP init: read
from the committed records; trains nothing.

python study/structure_report.py  # -> study/records/small_data/structure/{results.md,results.json,which_init.png}
# which_init.png: README's "Which init, when" figure, each impulse beside its norm-matched control where measured
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: study/ beside structinit_hf/

from structinit_hf.train._internal import script_imports

with script_imports():
    from structinit_hf.atomic import write_json, write_text
    from study.campaign.advice import plot_advice
    from study.campaign.sources import BENCH
    from study.campaign.structure import build_structure, render_structure

if __name__ == "__main__":
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root (default: .)")
    parser.add_argument("--out-dir", type=Path, default=Path(f"{BENCH}/structure"))
    args = parser.parse_args()
    with script_imports():  # the figure needs matplotlib (the bench extra)
        record = build_structure(args.root)
        write_json(args.out_dir / "results.json", record)
        write_text(args.out_dir / "results.md", render_structure(record))
        campaign = json.loads((args.root / BENCH / "campaign" / "results.json").read_text())
        plot_advice(campaign, record, args.out_dir / "which_init.png")
    print(f"wrote {args.out_dir / 'results.md'}, results.json and which_init.png")
    sys.exit(0)
