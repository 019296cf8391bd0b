"""Sub-commands of the ``hmmmerge`` CLI, one module each (see :mod:`hmmmerge.cli`)."""
