"""Bundled demo workloads (run by ``polyprof demo``)."""
