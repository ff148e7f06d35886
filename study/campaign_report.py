"""The small-data campaign's summary from the committed benchmark records; trains nothing.

python study/campaign_report.py  # -> study/records/small_data/campaign/{results.md,results.json,*.png}
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: study/ beside structinit_hf/

from structinit_hf.train._internal import script_imports

with script_imports():
    from study.campaign.report import campaign_parser, report_campaign

if __name__ == "__main__":
    args = campaign_parser(__doc__.splitlines()[0]).parse_args()
    with script_imports():  # the figures need matplotlib (the bench extra)
        report_campaign(args)
    sys.exit(0)
