"""The input pipeline: a dataset's sources (:mod:`.sources`, local image folders :mod:`.image_folders`), its splits
cut for a run (:mod:`.splits`), images decoded (:mod:`.images`, :mod:`.tensor_data`), augmented
(:mod:`.tensor_augment`) and batched (:mod:`.dataloaders`)."""
