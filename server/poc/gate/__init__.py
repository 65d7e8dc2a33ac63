"""The priority gate: while a mining round runs, inference waits or is refused (admission) and gated RPCs are turned away."""
