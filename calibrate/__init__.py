# how calibrate fits the per-iteration overhead: per technique, one for all techniques, or not at all
# (here, not in calibrate.fit, so the CLI can offer the choices without importing numpy at start-up)
OVERHEAD_KINDS = ("technique", "shared", "none")
