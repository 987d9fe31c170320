"""The middleware (I/O, anyio): `FreshCache` and what carries out the engine's
decisions: read flights, list walks, listen streams, background work, the agent-step
context, the memory store and telemetry."""
