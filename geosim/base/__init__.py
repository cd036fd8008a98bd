"""The base floor: errors, units, atomic files, the parameters' declaration, the one number and file check,
input limits, plausibility warnings, FABRIC's site catalog, GPU generations' facts, registry discovery. Imports
nothing above it."""
