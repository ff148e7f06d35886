"""A training run's life: its folder and lock (:mod:`.run_folder`), its set-up (:mod:`.prepare`, :mod:`.memory_plan`),
the loop and its step (:mod:`.loop`, :mod:`.step`), checkpoints (:mod:`.checkpoints`) and stopping on a signal
(:mod:`.stopping`)."""
