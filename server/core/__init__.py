"""What every part of the server stands on: its errors and how a refusal is sent, the engine instances, health, shutdown, the control token, request ids, and how a service is registered."""
