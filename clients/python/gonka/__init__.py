"""Gonka ML node packages."""
