"""What every run adapter shares (kgen.cluster, kgen.baremetal): per-rank records, one verdict, its views."""
