"""The model a run trains or scores: built and loaded from any source (:mod:`.loading`, its keywords :mod:`.kwargs`),
scored (:mod:`.evaluation`) and saved for timm and transformers (:mod:`.export`)."""
