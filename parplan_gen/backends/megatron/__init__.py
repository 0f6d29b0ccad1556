"""Megatron-LM / Megatron-Core: capabilities, constraints, mapping, templates, facts, reader."""
