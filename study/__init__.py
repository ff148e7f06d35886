"""The repository's own research, apart from the installed package: the small-data campaign's harness, profiles and
report, the measurements behind docs/, diagnosis scripts, and the committed records (``records/``); README.md indexes
them. Run from the repository root (``python study/<script>.py``); nothing in ``structinit_hf`` imports it."""
