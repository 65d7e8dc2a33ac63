"""The API node's callbacks: a round's artifacts and verdicts in the deployed bodies, pushed from a durable store with retries or offered on the pull stream (the callback stream service)."""
