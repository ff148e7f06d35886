"""The training application (the ``train`` extra): settings, run folders, data, the loop, checkpoints,
evaluation, fine-tuning, Hub upload and model cards. Built on the plugin; the plugin never imports it."""
