"""Crash isolation: native faults in a backend cannot take sparseloom's process down.

The first compile, load and run of each new (backend version, device, CPU, configuration,
model) combination happens in a child process (:mod:`~sparseloom.isolation.probe`); its outcome
is cached, and the calling process loads only combinations seen to work
(:mod:`~sparseloom.isolation.guard`). ``SPARSELOOM_ISOLATION=off`` turns it off.
"""
