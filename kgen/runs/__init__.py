"""What every run adapter shares (kgen.cluster, kgen.baremetal, kgen.slurm); it imports none of them.

- ``records``: the per-rank records a verdict is decided from (each adapter fills them);
- ``exitcodes``: what each exit code of kgen's entrypoint means (one table);
- ``verdict``: pure: records -> a run's verdict and root cause, its state and `kgen status` exit code;
- ``views``: text and JSON of verdicts and run lists, ``[rank]`` log prefixes (pure; the CLI prints them);
- ``store``: the local records of runs on this machine (where they live, run names, private files, load and list);
- ``stamps``: the time stamps of records and node log lines (split, ``--since``, merged in time order);
- ``safetext``: text from a run made safe for a terminal (logs and every text of a verdict; pure).
"""
