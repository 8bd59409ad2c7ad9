"""Bare-metal runs (`kgen launch` over ssh, or --local): I/O at the edge, decisions in the middle.

- ``hosts``: --hosts / --hostfile, rank order (pure);
- ``transport``: the system OpenSSH client (BatchMode, connect timeout, shared connections) or a local
  process; every call runs kgen's entrypoint on the host;
- ``launch``: the pre-flight dialogue with every host, then every node started detached;
- ``record``: the local record of a run ($XDG_STATE_HOME/kgen/runs/<RUN>.json);
- ``adapter``: each host's run state -> the per-rank records of kgen.runs.records (pure);
- ``engine``: status, logs, stop, remove, list, one round trip per host, all hosts at once; ``ENGINE``, the
  bare-metal engine of the run verbs.

Nothing here imports kgen.cluster or the ``kubernetes`` client (what both share is kgen.runs); `kgen
render`/`lint` import none of it.
"""
