"""The comparison a user runs: ``structinit-hf compare`` (:mod:`.compare_inits`), its arms, profiles, paired-seed
statistics and tie rule, the summary it writes, and the attention pictures (``scripts/plot_attention.py``).
Training goes through :func:`structinit_hf.train.run` only."""
