"""The network lab: an emulated geo-distributed slice on one machine (issue 7) and the probes
that measure a network, emulated or real.

  emulator.py   up / down / current / leftovers: the Python API of a slice
  forwarder.py  the process that owns a slice: builds it, delays frames, tears it down
  netns.py      namespaces, TAP devices, their teardown
  measure.py    RTT and TCP throughput between two hosts of a slice
  probe.py      the measuring ends (in namespaces, and between Ray nodes)
  agent.py      `geosim live probe`: a probe agent on every Ray node -> a scenario file
  cli.py        `geosim live wan up|down|status|measure`

N network namespaces, each with a TAP device `wan0`, joined by a user-space forwarder that
holds every frame for a one-way delay of RTT/2 (plus optional jitter and loss); an optional
bandwidth cap is a tbf qdisc on each host's egress. See docs/guide/wan-emulator.md.
Nothing here imports more than the standard library at module level.
"""
