"""Agent backends. Nothing here imports the A2A SDK: backends speak only `events`."""
