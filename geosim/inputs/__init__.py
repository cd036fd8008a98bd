"""What a prediction is asked: the specs (GPU, host, link, cluster, model, workload, params), the catalogs and
scenario files that make them, runtimes, the parameters file, generated scenarios, a cluster's structure, one Case,
and run records."""
