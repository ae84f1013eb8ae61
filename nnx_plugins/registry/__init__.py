"""The plugin registry: hook specs, entry-point discovery, name lookup, collisions and failures."""
