"""What the bot asks of clusters: the cluster calls (``on_cluster``), the signed asks the
web role sends the workers and their wire, identity (whose Unix user), trust (a worker
re-derives what a record claims) and authority (a moving launch admitted again)."""
