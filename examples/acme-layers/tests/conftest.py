pytest_plugins = ["nnx_plugins.testing"]
