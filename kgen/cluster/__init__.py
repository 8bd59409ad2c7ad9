"""Cluster verbs (`kgen status/logs/stop/submit/list`): I/O at the edge, decisions in the middle.

- ``client``: the only module that imports the ``kubernetes`` package (lists, watches, log streams,
  deletes, server-side apply), returning plain dicts exactly as the API server sent them;
- ``exitcodes``: what each container exit code of a kgen pod means (one table);
- ``verdict``: pure: pods + Job/StatefulSet + events (+ optional log tails) -> a run's verdict and root cause;
- ``logs``: merging concurrent log streams with ``[rank]`` prefixes;
- ``views``: text and JSON for the commands (pure; ``kgen.cli_cluster`` prints them).
"""
