"""The sources: the `Source` protocol and the transports that move bytes (HTTP, SSE,
2025 HTTP, stdio), the official SDK client's adapter and the loader. They ask
`freshcache._protocol` every protocol question and the core every freshness one."""
