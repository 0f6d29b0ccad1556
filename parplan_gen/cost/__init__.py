"""cost: what one layout of one model costs on one cluster.

Owns the hardware catalog and cluster descriptions, the layout (how the GPUs are split) and its
bounds, and the cost model that turns (model, cluster, layout, rules) into memory and time
figures. May import `inputs`, `models` and `rules`.
"""
