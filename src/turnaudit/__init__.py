"""The turn-audit pipeline."""
