"""The MCP server: the six tools over stdio (:mod:`.server`), their schemas, argument errors and
progress notifications."""
