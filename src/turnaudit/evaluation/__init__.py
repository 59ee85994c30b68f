"""EVR-6: HTIR label packs, auditors, evidence and the pre-registered gate."""
