"""A class: many students graded at once, each exactly as alone. The batch on one host (batch, its worker
processes: workers, batch_worker), on Dask beyond one host (cluster, cluster_tls, cluster_preload), and the
remote client an LMS container sends one student to the grading service with (remote); their results are
kept by one store (store)."""
