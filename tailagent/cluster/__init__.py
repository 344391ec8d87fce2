"""Boxes that share one store and one tailnet name: how a request for one box's work
that reaches another gets there (carry.py)."""
