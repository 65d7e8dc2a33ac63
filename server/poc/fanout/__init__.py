"""A round's artifacts fanned out: the hub that numbers and buffers them for subscribers, and the callback stream service."""
