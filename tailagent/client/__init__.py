"""`tailagent call`: send work to an A2A agent and render what comes back."""
