"""render: the files that launch a plan.

Owns the backend mapping (templates/mapping.yaml), the facts the templates read, the Jinja
sandbox, the report and charts, the checks every file passes, shell quoting, the readers of
existing DeepSpeed/Megatron configs, and the writer that puts a plan's files in place as one
set. May import every layer below (`inputs`, `models`, `rules`, `cost`, `planning`).
"""
