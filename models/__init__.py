"""Model cards: one TOML file per LM that ppl-tok knows by name (see docs/models.md)."""
