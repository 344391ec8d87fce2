"""tailagent: a coding agent on your tailnet, spoken to over A2A."""

__version__ = "0.1.0"
