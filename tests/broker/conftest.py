"""The broker tier: every test here carries the ``broker`` mark (the root conftest checks)."""
