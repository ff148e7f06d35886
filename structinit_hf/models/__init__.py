"""The plugin's models: the timm registry and the transformers classes.

- :mod:`.structinit_vit`: :class:`~.structinit_vit.StructInitVisionTransformer` and its registered names
  (``vit_tiny_impulse3`` ...), as timm's own ``vision_transformer.py`` writes a registry.
- :mod:`.common`: what both registry files share (the CIFAR-10 data cfg, the geometry check, the build steps).
- :mod:`.convit_baseline`: ``convit_tiny_patch2_32``, timm's ConViT at the CIFAR geometry.
- :mod:`.timm_wrapper`: the transformers route (``StructInitViTConfig``, the ``StructInitViT*`` models) and the
  checkpoint folder every saved model gets (``save_checkpoint``). Needs transformers.
"""
