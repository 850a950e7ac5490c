"""The cluster state both backends drive: jobs and their states, GPU occupancy, free GPUs,
the cost model and the accounting (:mod:`.cluster_state`), with its indexes (:mod:`.free`,
:mod:`.occupancy`) and costs (:mod:`.costs`). See docs/architecture.md."""
