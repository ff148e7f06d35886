"""Publishing a run: its model card (:mod:`.cards`, the templates in ``card_templates/``) and the Hub upload
(:mod:`.hub`)."""
