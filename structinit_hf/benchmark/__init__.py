"""The comparison harness: ``compare`` (the quick side-by-side run a user starts), the small-data benchmark and its
campaign, the solver, training-throughput and memory benchmarks, and the attention pictures and measurements they
report. Each module is the library half of one ``scripts/`` entry point (or several)."""
