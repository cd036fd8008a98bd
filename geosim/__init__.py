"""geosim: predict, measure and choose parallel training techniques for geo-distributed GPU slices."""

__version__ = "0.1.0"
