"""Lifted transforms: JAX transforms over functions that take and return Modules."""
