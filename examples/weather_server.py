"""The example MCP server that can be rug-pulled (lockstep/demo/weather_server.py, which ``lockstep demo``
runs), from a checkout:

    python examples/weather_server.py --port 8765          # serves http://127.0.0.1:8765/mcp
    kill -USR1 <pid>                                       # the rug pull
"""

from lockstep.demo.weather_server import (
    FORECAST_DESCRIPTION,
    INSTRUCTIONS,
    POISONED_DESCRIPTION,
    NotifyingServer,
    build_server,
    main,
    rug_pull,
    serve,
)

__all__ = ["FORECAST_DESCRIPTION", "INSTRUCTIONS", "POISONED_DESCRIPTION", "NotifyingServer", "build_server",
           "main", "rug_pull", "serve"]

if __name__ == "__main__":
    main()
