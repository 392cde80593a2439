"""Live game days: the session, its server and protocol, the terminal console, the scoreboard."""
