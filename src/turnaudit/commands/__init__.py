"""Command groups of the ``turnaudit`` CLI."""
