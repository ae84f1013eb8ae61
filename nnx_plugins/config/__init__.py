"""Model configs: reading files, validating every section, building models, the round trip, the schema."""
