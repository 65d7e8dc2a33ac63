"""Unit tests of engine_ext.consensus: conformance, batching, properties, bad input."""
