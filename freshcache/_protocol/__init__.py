"""The MCP client rules, both revisions, sans-IO: `_client` (`ClientProtocol`, the
revision strategies), `_http` (the HTTP binding), `_wire` (messages, schema, error
codes), `_legacy` (2025-11-25 sessions). Nothing here moves bytes."""
