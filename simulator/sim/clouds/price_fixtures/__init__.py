"""Recorded, real-shaped answers of the providers' price APIs (see `sim/clouds/prices.py`)."""
