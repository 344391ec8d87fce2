"""The A2A side: tasks, turns, answers and state. Imports no agent SDK."""
