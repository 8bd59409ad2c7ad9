"""The Kubernetes adapter of the run verbs (`kgen status/logs/stop/submit/list` on a cluster): I/O at the
edge, decisions in the middle. It never imports kgen.baremetal; what both share is kgen.runs.

- ``engine``: the run verbs on a cluster (status, watch, logs, stop, submit, list); ``ENGINE``, the cluster engine
  of kgen.runs.engine.Engine; ``apply``: submit's preflight, server-side apply, roll back and the run's Secret;
- ``client``: the only module that imports the ``kubernetes`` package (lists, watches, log streams,
  deletes, server-side apply), returning plain dicts exactly as the API server sent them;
- ``kube_records``: pods + Job/StatefulSet + events (+ log tails) -> the per-rank records of kgen.runs.records;
- ``verdict``: ``decide``: API objects -> records -> kgen.runs.verdict.judge (one decision for every run);
- ``state``: what `kgen status --watch` knows while it follows the watches (pure);
- ``logs``: merging concurrent log streams with ``[rank]`` prefixes;
- ``labels``, ``errors``: how a run's objects are found; the cluster's one-line errors.
"""
