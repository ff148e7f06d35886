"""The attention inits, pure torch (no timm, no transformers).

- :mod:`.options`: the init methods, the impulse init's options and presets, and their one validator.
- :mod:`.impulse`: impulse shifts, target maps and pseudo inputs.
- :mod:`.solvers`: the query/key solvers (``shift``, ``svd``, ``pinv``, ``adam``).
- :mod:`.mimetic`: mimetic init's factors.
- :mod:`.layouts`: where a timm or transformers ViT keeps the weights an init writes.
- :mod:`.apply`: :func:`~.apply.apply_structured_init`, which runs a named init on a model.
"""
