"""A launch: its spec, its submission over SSH, the recipes, its run record, its jobs found
again."""
