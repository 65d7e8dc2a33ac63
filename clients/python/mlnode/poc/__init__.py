"""Package mlnode.poc."""
