"""The jobs that change a warehouse, the only holders of its writer lock: the parallel ingest
(fanout), rollup, nightly and the copies (detach, attach)."""
