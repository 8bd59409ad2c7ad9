"""kgen's command line: the only package that imports click, prints or exits.

``root`` is the ``kgen`` group (error mapping, exit codes, ``--version``); it imports one module per
verb group (``render``: render, values, presets, entrypoint; ``lint``; ``cluster``: status, logs,
stop, submit, list; ``baremetal``: launch; ``completion``), which import the library and
``options`` (the options and helpers every group shares), never each other or the root.

In-process callers (tests, Python users) use ``kgen.cli.main`` or ``kgen.cli.cli``.
"""

from kgen.cli.root import EXIT_BROKEN_PIPE, cli, main, stdout_error

__all__ = ["EXIT_BROKEN_PIPE", "cli", "main", "stdout_error"]
