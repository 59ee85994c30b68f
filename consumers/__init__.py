"""Consumer services reading the turn-events stream."""
