"""The command line: the parsers (:mod:`.args`), the checks of the values argparse cannot check
(:mod:`.settings_checks`), the user errors (:mod:`.errors`) and how every script runs (:mod:`.commands`)."""
