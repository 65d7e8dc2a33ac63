"""The API node's callbacks: a round's artifacts and verdicts in the deployed bodies, their durable store and the retried sending."""
