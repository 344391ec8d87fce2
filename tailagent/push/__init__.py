"""Push notifications to callers: where they may go, and how they are delivered."""
