"""The Kubernetes versions kgen targets: one place for `kgen render` and `kgen lint`.

The default target is 1.33. It turns on podFailurePolicy (GA in 1.31), so a preemption, eviction
or drain re-forms the group instead of failing the whole Job. Upstream supports only the newest
three minors (1.35-1.37) and the managed offerings' standard channels are past 1.31; 1.33 still
accepts clusters that lag two minors behind upstream. Older targets (down to 1.27) stay available
with --kubernetes-version; 1.34+ also adds podReplacementPolicy. Kept import-free: kgen.cli reads it.
"""

MIN_K8S, MAX_K8S, DEFAULT_K8S = 27, 37, 33
DEFAULT_KUBERNETES_VERSION = f"1.{DEFAULT_K8S}"
