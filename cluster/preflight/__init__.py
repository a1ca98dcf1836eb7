"""Checks before a launch (partitions, images, recipes, accounts), discovery of a cluster,
its GPUs."""
