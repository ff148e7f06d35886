"""The attention inits, pure torch (no timm, no transformers).

- :mod:`.options`: the init methods, the impulse init's options and presets, and their one validator.
- :mod:`.impulse`: impulse shifts, target maps and pseudo inputs.
- :mod:`.solvers`: the query/key solvers (``shift``, ``svd``, ``pinv``, ``adam``).
- :mod:`.mimetic`: mimetic init's factors.
- :mod:`.token_mixing`, :mod:`.position_bias`: the impulse in a relative bias table or MLP, a rotary head's biases,
  a token MLP.
- :mod:`.layouts`, :mod:`.relative_layouts`: where a timm or transformers model keeps the weights an init writes.
- :mod:`.check`: the impulse init's self-check and its one-line refusal (:class:`~.check.InitRefused`).
- :mod:`.apply`: :func:`~.apply.apply_structured_init`, which runs a named init on a model, and
  :func:`~.apply.init_refusal`, which asks whether it would take.
"""
