"""JobSet and Kueue facts kgen derives names and labels from (pure functions, no I/O).

JobSet (jobset.x-k8s.io/v1alpha2, API reference: api/jobset/v1alpha2/jobset_types.go):
- child Job ``<jobset>-<replicatedJob>-<jobIndex>``; with ``network.enableDNSHostnames`` every pod is
  reachable as ``<jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain>``, the subdomain
  defaulting to the JobSet name, through a headless Service the JobSet controller creates (and
  owns) with ``publishNotReadyAddresses`` defaulting to true;
- the webhook rejects a JobSet whose longest pod name ``<...>-<podIndex>-abcde`` is not a DNS-1035
  label (at most 63 characters), and a subdomain that is not a DNS-1035 label;
- every group restart bumps ``status.restarts`` and recreates the child Jobs, whose pods carry the
  label/annotation ``jobset.sigs.k8s.io/restart-attempt``.
- failure policy rules match the child Job's failure condition: reason (``PodFailurePolicy``,
  ``BackoffLimitExceeded`` ...) and, from JobSet v0.10.0, its message (``onJobFailureMessagePatterns``).
  The Job controller writes ``Pod <ns>/<pod> has condition DisruptionTarget matching FailJob rule at
  index <i>`` and ``Container <c> for pod <ns>/<pod> failed with exit code <n> matching FailJob rule
  at index <i>`` (pkg/controller/job/pod_failure_policy.go), so the index of the child Job's
  podFailurePolicy rule tells the JobSet rules which kind of failure it was.

Kueue: the LocalQueue is the ``kueue.x-k8s.io/queue-name`` label on the Job's / JobSet's /
StatefulSet's own metadata (Kueue docs, tasks/run/{jobs,jobsets,statefulset}.md); the
WorkloadPriorityClass is the ``kueue.x-k8s.io/priority-class`` label; topology-aware placement is
one of the ``kueue.x-k8s.io/podset-{required,preferred}-topology`` annotations on the *pod
template* (tasks/run/topology_aware_scheduling.md).
"""

from __future__ import annotations

API_VERSION = "jobset.x-k8s.io/v1alpha2"
REPLICATED_JOB = "node"  # one replicatedJob, one child Job, N Indexed pods
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
POD_NAME_SUFFIX = len("-abcde")  # the random suffix the JobSet webhook budgets for

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"

# Indexes of the child Job's podFailurePolicy rules; the JobSet rules match on them.
PFP_DISRUPTION_INDEX = 0
PFP_NOT_RETRIABLE_INDEX = 1
NOT_RETRIABLE_EXIT_CODES = (2, 4, 6)  # entrypoint: configuration error, group never formed, stopped by user

# Job failure reasons a JobSet rule can name (batch/v1 JobConditionReason values).
JOB_FAILURE_REASONS = (
    "PodFailurePolicy",
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "MaxFailedIndexesExceeded",
    "FailedIndexes",
)


def job_name(jobset: str, replicated_job: str = REPLICATED_JOB, job_index: int = 0) -> str:
    return f"{jobset}-{replicated_job}-{job_index}"


def pod_hostname(jobset: str, pod_index: int, replicated_job: str = REPLICATED_JOB, job_index: int = 0) -> str:
    return f"{job_name(jobset, replicated_job, job_index)}-{pod_index}"


def pod_fqdn(jobset: str, subdomain: str, pod_index: int, replicated_job: str = REPLICATED_JOB) -> str:
    return f"{pod_hostname(jobset, pod_index, replicated_job)}.{subdomain}"


def longest_pod_name(jobset: str, nodes: int, replicated_job: str = REPLICATED_JOB, replicas: int = 1) -> str:
    """What the JobSet webhook checks: the last pod's name with a 5-character random suffix."""
    return f"{pod_hostname(jobset, nodes - 1, replicated_job, replicas - 1)}-abcde"


def max_name_length(nodes: int, replicated_job: str = REPLICATED_JOB) -> int:
    """Longest JobSet name whose pod names still fit 63 characters."""
    return 63 - len(longest_pod_name("", nodes, replicated_job))


def message_pattern(index: int) -> str:
    """RE2 pattern of the Job failure message written when podFailurePolicy rule ``index`` fails the Job."""
    return f"matching FailJob rule at index {index}$"
