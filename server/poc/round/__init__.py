"""A mining round: its control (start, stop, state) and the mining loop over the engines."""
