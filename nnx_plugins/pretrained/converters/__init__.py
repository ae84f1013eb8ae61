"""The built-in converters, one module per family (registered in ``nnx.converters``)."""
