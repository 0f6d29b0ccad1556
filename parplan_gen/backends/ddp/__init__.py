"""Plain torchrun DDP: its capabilities (its files are the launchers every plan has)."""
