"""Cluster verbs (`kgen status/logs/stop/submit/list`): I/O at the edge, decisions in the middle.

- ``client``: the only module that imports the ``kubernetes`` package (lists, watches, log streams,
  deletes, server-side apply), returning plain dicts exactly as the API server sent them;
- ``exitcodes``: what each container exit code of a kgen pod means (one table);
- ``records``: the per-rank records a verdict is decided from (shared with kgen.baremetal);
- ``kube_records``: the Kubernetes adapter: pods + Job/StatefulSet + events (+ log tails) -> records;
- ``verdict``: pure: records -> a run's verdict and root cause (one decision for cluster and bare-metal runs);
- ``logs``: merging concurrent log streams with ``[rank]`` prefixes;
- ``views``: text and JSON for the commands (pure; ``kgen.cli_cluster`` prints them).
"""
