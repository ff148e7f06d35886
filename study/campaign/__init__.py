"""The small-data campaign: which init, and when, from the committed benchmark records.

Reads the ``results.json`` files the harness wrote for the ``cpu-proxy`` family of profiles (no training here) and
writes one summary: test top-1 per init at every training-set size (with ConViT beside the inits), the gain over timm's
default against size, the main table at 25,000 images, 10 against 50 epochs at 2,500 images, and at 5,000 images the
inits under each augmentation regime (crop + flip, RandAugment, Mixup + CutMix) with the gain over timm's default per
regime. Comparisons are paired: an init against a reference on the same seed (the same split, data order and
augmentation), under the tie rule of :mod:`structinit_hf.benchmark.stats`.

    python study/campaign_report.py      # writes study/records/small_data/campaign/{results.md,results.json,size.png,
                                           #   augmentation.png}

The repository's own study, apart from the harness: :mod:`.sources` (which records), :mod:`.scores` (one setting's
scores under the tie rule), :mod:`.records` (the record), :mod:`.tables` (``results.md``), :mod:`.figures` and
:mod:`.report` (the script's command).
"""
