"""Planning a launch before it runs: its cost and start estimate (``cost``), where
``cluster=auto`` puts it (``placement``), pipelines (``after=``, ``then=``), sweeps, and
which checkpoint a start or a clean-up names (``checkpoints``, ``start_from``)."""
