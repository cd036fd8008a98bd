"""Built-in scenario files (installed as geosim.scenarios)."""
