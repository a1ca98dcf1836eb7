"""Redis: the only place that imports redis. Launch records, queue, outbox, leases and the rest."""
