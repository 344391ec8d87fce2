"""Boxes that share one store and one tailnet name: a request for one box's work that
reaches another is carried there (carry.py); each box keeps its load in the store
(boxes.py), so new conversations start where there is room and a box gone is noticed
(placement.py)."""
