"""The ``semsearch`` command: parse, call the library, print (:mod:`.commands`, :mod:`.output`)."""
