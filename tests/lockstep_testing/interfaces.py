"""Interface documents shared by tests."""

WEATHER = {
    "instructions": "Weather data for agents.",
    "tools": [
        {"name": "get_forecast", "description": "Get the forecast for a city.",
         "inputSchema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 64}},
                         "required": ["city"], "additionalProperties": False},
         "annotations": {"readOnlyHint": True}},
        {"name": "get_alerts", "description": "Active alerts for a state.",
         "inputSchema": {"type": "object", "properties": {"state": {"type": "string"}}}},
    ],
    "prompts": [{"name": "weekly_summary", "arguments": [{"name": "city", "required": True}]}],
}
