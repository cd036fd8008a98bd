"""FABRIC: the site catalog, RTTs from geography, slices through fablib, calibration on a slice."""
