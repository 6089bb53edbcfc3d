"""The Lockstep sidecar: measures the MCP server beside it and reports to the operator."""
