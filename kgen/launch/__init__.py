"""The launch model: how a command starts training, read one way by render, lint, the CLI and the sdk.

- ``shell``: a POSIX/bash parser for the scripts containers and sbatch files run (words split as bash does);
- ``command``: a container's command + args (or a script's commands) read through shells and wrappers down to
  the training launchers (torchrun, ``python -m torch.distributed.run``, deepspeed, accelerate, kgen's entrypoint);
- ``launchers``: the launcher table (which options take a value, by launcher) and the nested-launcher reading
  that `kgen render`/`submit`/`launch` refuse; the entrypoint's copy is held to it by tests/test_launchers.py.

A leaf: it imports no room of kgen (pure functions, stdlib only).
"""
