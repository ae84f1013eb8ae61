"""The pretrained tests' ``imported`` fixture (a fixture checkpoint imported once), for the
tasks' checks of imported models."""

from tests.nnx_plugins.pretrained.conftest import imported  # noqa: F401
