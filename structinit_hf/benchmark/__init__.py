"""The comparison harness: ``compare`` (the quick side-by-side run a user starts), the small-data benchmark and its
campaign, and the attention pictures and measurements they report."""
