"""Hugging Face Accelerate: its capabilities, constraints, mapping, templates, facts and reader."""
