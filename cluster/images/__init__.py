"""Images on a cluster: what is there, copying the prebuilt ones, converting registry images."""
