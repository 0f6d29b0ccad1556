"""DeepSpeed: its capabilities, constraints, mapping, templates, facts and reader."""
