"""Gonka ML node: protocol stubs (v1) and the Python client."""
