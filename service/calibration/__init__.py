"""``tokenizer-service calibrate`` and ``replicas="auto"``: what one tokenizer does on this machine, measured by
short probe processes (:mod:`.measure`, :mod:`.probes`), kept per machine, tokenizer and package versions
(:mod:`.store`), and the replicas x threads planned from it (:mod:`.auto`, by :mod:`service.sizing`'s planner).
The package imports nothing at import time: the launcher and the server import the module they need."""
