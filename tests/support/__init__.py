"""Helpers shared by both test tiers (no test module imports another)."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
