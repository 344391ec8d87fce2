"""The agent card: what this agent is, where to reach it, and (later) its signature."""
